"""How sure the answer blocks are: on a trace, the next turns ``structure/answers.py`` finds and
what the trace says about them.

    .venv/bin/python benchmarks/answer_blocks.py [--trace FILE]

A hash-id trace cannot show that a next turn repeats the earlier answer; two things it can show
are what an answer's blocks would look like: the next turn is at least as long as the earlier
prompt and answer together, and its blocks at the answer's positions are new (first looked up
in that turn: nobody sent that content before, as nobody had the answer). Prints both, and how
many blocks and prompt tokens the answers cover.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from engine_conformance import BUNDLED, load

from prefixscope.analysis.structure.answers import answer_blocks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, default=BUNDLED, help="a Mooncake trace (.jsonl[.gz])")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="prefixscope-answers-") as tmp:
        trace, traffic = load(args.trace, Path(tmp))
    out = np.asarray(traffic.output_tokens)
    found = answer_blocks(trace, out)
    a = np.flatnonzero(found.count)
    b = found.child[a]
    long_enough = trace.input_tokens[b] >= trace.input_tokens[a] + out[a]
    first_seen = np.full(trace.n_unique, trace.n_requests, np.int64)
    np.minimum.at(first_seen, trace.blocks, trace.request_of_lookup)
    new = 0
    for r, child in zip(a, b, strict=True):
        start = trace.offsets[child] + found.first[r]
        ids = trace.blocks[start : start + found.count[r]]
        new += int((first_seen[ids] == child).sum())
    n_blocks = found.n_blocks
    print(f"{args.trace.name}: {trace.n_requests:,} requests")
    print(f"  with an answer in a next turn: {len(a):,}")
    print(f"  next turn at least prompt + answer long: {long_enough.mean():.1%}")
    print(f"  answer blocks: {n_blocks:,}, first looked up in the next turn: {new / n_blocks:.1%}")
    share = n_blocks * trace.block_size / trace.input_tokens.sum()
    print(f"  prompt tokens they cover: {share:.2%} of all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

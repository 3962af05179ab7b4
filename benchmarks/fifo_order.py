"""FIFO in two request orders on the bundled trace: ours (a request's blocks inserted deepest
first, eviction after the request) against the KVCache.AI simulator's (parent first, eviction
before each insert), token hit rate over windows ``all`` and ``last-half``.

    .venv/bin/python benchmarks/fifo_order.py
"""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from pathlib import Path

import numpy as np

from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.measure import hit_tokens

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
CAPACITIES = (1_000, 2_000, 4_000, 8_000, 16_000)


def peer_hit_blocks(trace: Trace, capacity: int) -> np.ndarray:
    """The peer's order: look up the leading run, then insert the request's new blocks parent
    first, evicting the oldest insert before each one; a hit does not refresh."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = np.zeros(trace.n_requests, np.int32)
    for r in range(trace.n_requests):
        ids = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        k = 0
        while k < len(ids) and ids[k] in cache:
            k += 1
        hits[r] = k
        for b in ids:
            if b not in cache:
                if len(cache) >= capacity:
                    cache.popitem(last=False)
                cache[b] = None
    return hits


def main() -> None:
    with gzip.open(SAMPLE, "rt") as f:
        lines = sorted((json.loads(line) for line in f), key=lambda d: d["timestamp"])
    trace = build_trace(
        [d["hash_ids"] for d in lines], [d["input_length"] for d in lines], ["t"] * len(lines), 512
    )
    inp, half = trace.input_tokens, trace.n_requests // 2
    for capacity in CAPACITIES:
        ours = hit_tokens(trace, POLICIES["fifo"].hit_blocks(trace, capacity))
        theirs = hit_tokens(trace, peer_hit_blocks(trace, capacity))
        for window, sel in (("all", slice(None)), ("last-half", slice(half, None))):
            a, b = ours[sel].sum() / inp[sel].sum(), theirs[sel].sum() / inp[sel].sum()
            print(
                f"{capacity:>7,} {window:>9}  ours {a:.4f}  peer order {b:.4f}  "
                f"difference {100 * (a - b):+.2f} points"
            )


if __name__ == "__main__":
    main()

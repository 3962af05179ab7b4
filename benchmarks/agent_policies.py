"""Benchmark: which eviction policy wins on coding-agent traffic, at which capacity.

Ingests an agent trace (``--traces PATH``: a kv-cache-tester ``traces/`` folder or archive;
default: the bundled sample, ``data/sample/agents/``) with ``--format agent-json``, then replays
it under the online policies ``lru``, ``ttl`` (300 s), ``s3fifo``, ``session`` and ``liveness``
and the offline bound ``belady``, at capacities that are shares of the trace's distinct blocks.
Prints each policy's token hit rate (window ``all``) and replay time, and per capacity the
online winner and its distance to Belady. The docs favour no policy: this run decides.

    make bench      # or: .venv/bin/python benchmarks/agent_policies.py [--traces PATH]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/agents/claude_code_traces.tar.gz"
ONLINE = ("lru", "ttl", "s3fifo", "session", "liveness")
SHARES = (0.01, 0.03, 0.1, 0.3)
TTL_S = 300.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=SAMPLE)
    parser.add_argument("--arrival", default="uniform:1h")
    args = parser.parse_args()
    from prefixscope import warehouse
    from prefixscope.analysis.policies import POLICIES, PolicyOptions
    from prefixscope.analysis.trace.load import load_trace
    from prefixscope.analysis.trace.measure import hit_tokens
    from prefixscope.ingest import IngestOptions
    from prefixscope.stages import ingest

    with tempfile.TemporaryDirectory(prefix="prefixscope-agent-policies-") as tmp:
        wh = Path(tmp) / "agents.duckdb"
        options = IngestOptions(tenant="agents", arrival=args.arrival)
        ingest.ingest_logs(wh, ingest.IngestSettings((str(args.traces),), "agent-json", options))
        with warehouse.connect(wh, read_only=True) as con:
            trace = load_trace(con)
    total = int(trace.input_tokens.sum())
    ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None)).sum() / total
    sessions = len(set(trace.sessions.tolist())) if trace.sessions is not None else 0
    print(
        f"{args.traces.name}: {trace.n_requests:,} requests, {sessions:,} sessions, "
        f"{trace.n_lookups:,} lookups of {trace.n_unique:,} distinct {trace.block_size}-token "
        f"blocks, placed {args.arrival}; ceiling {ceiling:.4f}"
    )
    names = (*ONLINE, "belady")
    print(f"{'capacity':>22} " + " ".join(f"{n:>9}" for n in names) + "  online winner")
    seconds = dict.fromkeys(names, 0.0)
    for share in SHARES:
        capacity = max(1, int(share * trace.n_unique))
        rates = {}
        for name in names:
            started = time.perf_counter()
            hits = POLICIES[name].hit_blocks(trace, capacity, PolicyOptions(ttl_s=TTL_S))
            seconds[name] += time.perf_counter() - started
            rates[name] = hit_tokens(trace, hits).sum() / total
        top = max(rates[n] for n in ONLINE)
        best = [n for n in ONLINE if rates[n] == top]
        rest = max((rates[n] for n in ONLINE if rates[n] < top), default=top)
        print(
            f"{capacity:>12,} ({share:>4.0%}) "
            + " ".join(f"{rates[n]:>9.4f}" for n in names)
            + f"  {', '.join(best)} (+{top - rest:.4f} on the next; Belady "
            f"+{rates['belady'] - top:.4f})"
        )
    shown = ", ".join(f"{n} {s:.2f} s" for n, s in seconds.items())
    print(f"replay time over the {len(SHARES)} capacities: {shown}")
    assert np.isfinite(ceiling)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

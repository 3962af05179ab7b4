"""Benchmark: ingest and simulate the bundled trace; prints timings (median of repeats).

make bench        # or: .venv/bin/python benchmarks/simulate_bundled.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.load import REPLAY_ORDER, load_trace
from prefixscope.stages import ingest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the oracle ships with the tests
from tests.oracles.policies import reference_hit_blocks  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
REPEATS = 7


def median_seconds(fn, repeats: int = REPEATS) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        t_ingest = median_seconds(
            lambda: ingest.ingest_logs(path, ingest.IngestSettings((str(SAMPLE),))), 3
        )
        con = warehouse.connect(path)
        t_load = median_seconds(lambda: load_trace(con), 3)
        trace = load_trace(con)
        requests = [
            r[0]
            for r in con.execute(
                f"SELECT block_hashes FROM requests ORDER BY {REPLAY_ORDER}"
            ).fetchall()
        ]
        con.close()

    print(
        f"bundled trace: {trace.n_requests:,} requests, {trace.n_lookups:,} block lookups, "
        f"{trace.n_unique:,} distinct blocks"
    )
    print(f"ingest (read, validate, store): {t_ingest * 1e3:8.1f} ms")
    print(f"load trace from the warehouse:  {t_load * 1e3:8.1f} ms")
    POLICIES["lru"].hit_blocks(trace, 10)  # compile (or load the cached machine code) first
    print(f"{'policy':<8} {'capacity':>10} {'median ms':>10} {'M lookups/s':>12}")
    for policy, capacity in [("ceiling", None), ("lru", 1_000), ("lru", 16_000), ("lru", 128_000)]:
        run = POLICIES[policy].hit_blocks
        t = median_seconds(lambda run=run, capacity=capacity: run(trace, capacity))
        cap = "inf" if capacity is None else f"{capacity:,}"
        print(f"{policy:<8} {cap:>10} {t * 1e3:10.2f} {trace.n_lookups / t / 1e6:12.1f}")
    t_ref = median_seconds(lambda: reference_hit_blocks("lru", requests, 16_000), 3)
    t_lru = median_seconds(lambda: POLICIES["lru"].hit_blocks(trace, 16_000))
    print(f"python reference lru @16,000: {t_ref * 1e3:.1f} ms")
    print(f"compiled lru is {t_ref / t_lru:.0f}x faster than the python reference")


if __name__ == "__main__":
    main()

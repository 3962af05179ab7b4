"""Benchmark: what a stale router view costs (``fleet --router-delay``), and what it costs the loop.

On the bundled hour, ``kv-aware`` over 8 replicas of 4,000 blocks (llama-3-8b on H100, the
default cost model) with its view of the caches 0, 0.1, 1, 10 and 60 s old, beside
``round-robin``, at 1×, 3× and 5× the traffic: the token hit rate, TTFT p50 / p95 and the miss
budget's ``stale_router_view`` share (docs/fleet.md, "A router's stale view"). Then the loop's
time for one configuration with and without a delay (best of 5, the miss budget kept).

    .venv/bin/python benchmarks/router_delay.py      # about half a minute here
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from prefixscope import warehouse
from prefixscope.analysis.fleet.budget import PARTS, per_request
from prefixscope.analysis.fleet.grid import engine_for
from prefixscope.analysis.fleet.run import Fleet, simulate_fleet
from prefixscope.analysis.fleet.settings import FleetSettings
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.trace.load import load_trace
from prefixscope.stages import ingest

SAMPLE = (
    Path(__file__).parent.parent / "data" / "sample" / "mooncake" / "conversation_trace.jsonl.gz"
)
DELAYS_S = (0.0, 0.1, 1.0, 10.0, 60.0)
LOADS = (1.0, 3.0, 5.0)
STALE = PARTS.index("stale_router_view")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        wh = Path(d) / "wh.duckdb"
        ingest.ingest_logs(wh, ingest.IngestSettings((str(SAMPLE),), "mooncake"))
        with warehouse.connect(wh, read_only=True) as con:
            trace, traffic = load_trace(con), load_traffic(con)
    engine, _ = engine_for(FleetSettings(), None)
    inp = trace.input_tokens.sum()
    print(f"{'router':<16} {'load':>5} {'hit':>7} {'TTFT p50':>9} {'p95':>8} {'stale':>7}")
    for load in LOADS:
        fleets = [Fleet("kv-aware", 8, 4_000, load_scale=load, router_delay_s=d) for d in DELAYS_S]
        fleets.append(Fleet("round-robin", 8, 4_000, load_scale=load))
        for f in fleets:
            o = simulate_fleet(trace, traffic, f, engine, budget=True)
            stale = per_request(o)[:, STALE].sum() / inp
            name = f.router + (f"@{f.router_delay_s * 1e3:g}ms" if f.router_delay_s else "")
            p50, p95 = np.percentile(o.ttft, [50, 95])
            print(f"{name:<16} {load:>4g}x {o.hit_tokens.sum() / inp:>7.4f} {p50:>8.3f}s "
                  f"{p95:>7.2f}s {stale:>7.4f}")  # fmt: skip
    for load in (1.0, 10.0):
        times = {}
        for d in (0.0, 10.0):
            f = Fleet("kv-aware", 8, 4_000, load_scale=load, router_delay_s=d)
            simulate_fleet(trace, traffic, f, engine, budget=True)  # compiled, warm
            runs = []
            for _ in range(5):
                t0 = time.perf_counter()
                simulate_fleet(trace, traffic, f, engine, budget=True)
                runs.append(time.perf_counter() - t0)
            times[d] = min(runs)
        print(f"loop at {load:g}x: {times[0.0] * 1e3:.1f} ms fresh, {times[10.0] * 1e3:.1f} ms "
              "with a 10 s view (best of 5)")  # fmt: skip


if __name__ == "__main__":
    main()

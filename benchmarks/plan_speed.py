"""Benchmark: the SLO planner's search (``plan --deployments … --slo …``) on the bundled hour.

The bundled trace (Kimi, 12,031 requests, 512-token blocks) is ingested into a scratch
warehouse; then, in this process (one core for the fleets; the compiled loop warmed first by a
search on a few requests, so compilation is not counted), two searches, each once:

- ``llama-3-8b`` on ``h100x1,h200x1`` at load scales 1 and 2, ``ttft-p95=2``: every router,
  DRAM tier and store, caching on and off;
- ``deepseek-v3`` on ``h200x8``, ``ttft-p95=5``: the demo's search;

each priced by the roofline and by the measured kernels (with the answer's range, a second
search of the cached fleets), side by side: seconds per fleet simulated, measured over roofline.
On the ``ideal`` engine, the one its figures in benchmarks/RESULTS.md were taken on; the
planner's default, the ``vllm`` pool, is timed on the week by ``plan_week.py``.

Prints the fleets simulated, the seconds and fleets per second, and the answer. Exit status 1
when a search takes 60 s or more, or a roofline-priced one simulates fewer than 100 fleets.

    make bench        # or: .venv/bin/python benchmarks/plan_speed.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from prefixscope.dashboards.plan_slo import sentences
from prefixscope.stages import ingest, plan_slo

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample" / "mooncake" / "conversation_trace.jsonl.gz"
LIMIT_S = 60.0
MIN_FLEETS = 100
ENGINE = "ideal"
SEARCHES = (
    ("llama-3-8b", ("h100x1", "h200x1"), (1.0, 2.0), "ttft-p95=2"),
    ("deepseek-v3", ("h200x8",), (1.0,), "ttft-p95=5"),
)


def main() -> int:
    failed = False
    with tempfile.TemporaryDirectory() as folder:
        wh = Path(folder) / "bench.duckdb"
        ingest.ingest_logs(wh, ingest.IngestSettings((str(SAMPLE),), "mooncake"))
        warm = plan_slo.PlanSloSettings(
            ("h100x1",), "ttft-p95=100", routers=("cache-aware",), engine=ENGINE
        )
        plan_slo.plan_for_slo(
            wh, warm
        )  # compiles the fleet loop (every router's path is one kernel)
        for model, deployments, scales, slo in SEARCHES:
            rates = {}
            for cost in ("roofline", "measured"):
                settings = plan_slo.PlanSloSettings(
                    deployments, slo, scales, model=model, cost_model=cost, engine=ENGINE
                )
                start = time.perf_counter()
                result = plan_slo.plan_for_slo(wh, settings)
                took = time.perf_counter() - start
                fleets = result.fleets.num_rows
                ranged = 0 if result.slower is None else sum(
                    len(o.fleets) for o in result.slower.outcomes)  # fmt: skip
                rates[cost] = (fleets + ranged) / took
                kv = {f["deployment"]: f["kv_pool_gib_per_gpu"] for f in result.fleets.to_pylist()}
                print(
                    f"{model} on {','.join(deployments)}, load "
                    f"{','.join(f'{s:g}' for s in scales)}, {slo}, {cost}: {fleets:,} fleets"
                    f"{f' and {ranged:,} for the range' if ranged else ''} in {took:.1f} s "
                    f"({rates[cost]:,.1f} fleets/s)"
                )
                for line in sentences(result.answers.to_pylist(), model, kv):
                    print(f"  {line}")
                # the roofline's searches are the fixed workload; the measured model's size
                # follows its own step times
                small = cost == "roofline" and fleets < MIN_FLEETS
                failed |= small or took >= LIMIT_S
            print(f"  measured against roofline, seconds per fleet: "
                  f"{rates['roofline'] / rates['measured']:.2f}×")  # fmt: skip
    print(f"limit: at least {MIN_FLEETS} fleets in under {LIMIT_S:g} s each: "
          f"{'missed' if failed else 'met'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

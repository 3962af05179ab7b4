"""Benchmark: the SLO planner on a generated week, on 2 Dask workers.

``plan --deployments h200x8 --model deepseek-v3 --slo ttft-p95=5 --disagg`` (the flow's SLO:
searched on the busiest hour, held in every hour, and the fleet split into prefill and decode
pools, on the planner's default engine, the ``vllm`` pool, where the flow's plan runs on
``ideal``; ``--per-window`` adds each window sized alone) on the week of
``benchmarks/make_week_trace.py`` (10.4 M requests, 250 M lookups, 168 hours), its fleets
fanned out with ``--dask-address`` to a local Dask cluster of 2 worker processes (1 thread
each) started here.

Reads ``DIR/week.duckdb`` where ``flow_speed.py --week --dir DIR`` left one (the week
ingested by the flow), else generates the week and ingests it. Prints the wall time and the
peak anonymous memory of every process under this one (the command, the Dask scheduler's
workers and their nannies; proportional shares, sampled every 0.5 s, as ``flow_speed.py``
samples them), then the answer. Exit status 1 when the command fails, or over 30 minutes or
12 GB.

    .venv/bin/python benchmarks/plan_week.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from flow_speed import _anon_pss  # noqa: E402 (the benchmark beside this one: its sampling)

CLI = [sys.executable, "-m", "prefixscope.cli"]
LIMIT_S, LIMIT_GB = 1800.0, 12.0
PLAN = ["--deployments", "h200x8", "--model", "deepseek-v3", "--slo", "ttft-p95=5", "--disagg"]


def warehouse(directory: Path) -> Path:
    """The week's warehouse: the flow's, where it is kept, else ingested here."""
    wh = directory / "week.duckdb"
    if wh.exists():
        return wh
    trace = directory / "week.jsonl"
    if not trace.exists():
        subprocess.run([sys.executable, str(HERE / "make_week_trace.py"), str(trace)], check=True)
    subprocess.run([*CLI, "ingest", "--format", "mooncake", "--input", str(trace),
                    "--tenant-field", "tenant", "--warehouse", str(wh)], check=True)  # fmt: skip
    return wh


def measured(cmd: list[str], out: Path) -> tuple[float, float]:
    """(wall seconds, peak GB) of ``cmd``, its output in ``out``: the memory of every process
    below this one, so the cluster's workers count as the command's own do."""
    me = psutil.Process()
    t0, peak = time.perf_counter(), 0
    with out.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            try:
                tree = me.children(recursive=True)
                peak = max(peak, sum(_anon_pss(p.pid) for p in tree if p.is_running()))
            except (psutil.Error, OSError):
                pass
            time.sleep(0.5)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {out.read_text()[-2000:]}")
    return time.perf_counter() - t0, peak / 1e9


def run(directory: Path) -> int:
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    from distributed import LocalCluster

    wh = warehouse(directory)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        cmd = [*CLI, "plan", "--warehouse", str(wh), *PLAN]
        cmd += ["--dask-address", cluster.scheduler_address]
        wall, peak = measured(cmd, directory / "plan_week.out")
    print(f"plan on the week, 2 Dask workers: {wall:.1f} s, peak {peak:.2f} GB")
    print((directory / "plan_week.out").read_text())
    return 0 if wall < LIMIT_S and peak < LIMIT_GB else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, help="where the week is kept (default: removed at exit)")
    p.add_argument(
        "--per-window",
        metavar="WINDOW",
        help="also size each window of this length alone (e.g. 6h; --slo-window WINDOW)",
    )
    args = p.parse_args()
    if args.per_window:
        PLAN.extend(["--slo-window", args.per_window, "--per-window"])
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        return run(args.dir)
    with tempfile.TemporaryDirectory(prefix="prefixscope-plan-week-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the whole ``fleet_report`` flow, as a user runs it (``prefixscope fleet-report``).

Two measurements:

- ``--cluster`` (default): the ×20 benchmark trace (``shared/tools/make_bench_trace.py 20``,
  20 tenants, 5.77 M lookups), once in process and once with ``--dask-address`` on a local
  Dask cluster of 2 worker processes (1 thread each) started here. Prints both times, each
  stage's, and their ratio; checks that both warehouses hold the same results (every
  simulation and fleet row). Exit status 1 below a 1.6× speed-up or on any difference.
- ``--week``: a generated week (``benchmarks/make_week_trace.py``: 10.4 M requests, 250 M
  lookups, 50 tenants), in process with ``--workers 2``. Prints the time, each stage's and the
  peak anonymous memory of the whole process tree (the flow and its worker processes,
  proportional shares, sampled every 0.5 s), and a table of each stage's seconds and peak.
  Exit status 1 when the command fails, or over 10 minutes or 12 GB.
- ``--slo-engines``: on the week's warehouse (``--week`` makes it), the flow's SLO plan
  (``prefixscope plan --slo …`` with the flow's own settings, ``--workers 2``) under each KV
  engine in turn, ``ideal`` (the flow's, ``DEFAULT_SLO_ENGINE``) and ``vllm``, each timed and
  sampled as a flow is, with its answers: what the flow's SLO plan would cost on ``vllm``.

Both runs share one Prefect server started here, so neither pays its start. The fleet loop is
compiled into numba's on-disk cache first, in a process of its own (``tests/warm_kernels.py``),
and its seconds printed apart: a flow on a cold cache (the first run after the loop changed)
compiles it in each of its two workers, about 110 s more (benchmarks/RESULTS.md), once per
install rather than per run. Traces are kept in ``--dir`` (made when absent, reused when
present).

    .venv/bin/python benchmarks/flow_speed.py [--cluster | --week | --slo-engines] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import psutil

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT.parent / "shared/tools/make_bench_trace.py"
CLI = [sys.executable, "-m", "prefixscope.cli"]


def _anon_pss(pid: int) -> int:
    """Bytes of a process's anonymous memory, its share of pages shared with others counted
    (``Pss_Anon`` of smaps_rollup): what the process allocated, leaving out file pages the
    kernel can drop (the input log, DuckDB's file, libraries)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss_Anon:"):
                return int(line.split()[1]) * 1024
    return 0


#: (epoch seconds, bytes) of the last measured command's memory, every sample.
SAMPLES: list[tuple[float, int]] = []
#: The last measured command's start and end, epoch seconds.
SPAN: list[float] = [0.0, 0.0]


def measured(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak GB of the process tree's memory) of ``cmd``: the sum of every
    process's anonymous proportional set size, so that pages a forked worker shares with its
    parent count once and file pages (the mapped input) not at all. Every sample is kept in
    ``SAMPLES``, for the stages' own peaks. A command that fails fails the benchmark."""
    SAMPLES.clear()
    t0, SPAN[0] = time.perf_counter(), time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            now = sum(_anon_pss(p.pid) for p in tree if p.is_running())
            SAMPLES.append((time.time(), now))
            peak = max(peak, now)
        except (psutil.Error, OSError):
            pass
        time.sleep(0.5)
    SPAN[1] = time.time()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode})")
    return time.perf_counter() - t0, peak / 1e9


def stages(wh: Path) -> list[tuple[str, float]]:
    return [(c, s) for c, s, *_ in stage_spans(wh)]


def stage_spans(wh: Path) -> list[tuple[str, float, float, float, str]]:
    """(command, seconds, started, finished (epoch seconds), status) of every run, in order."""
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(
            "SELECT command, epoch(finished_at - started_at), epoch(started_at), "
            "epoch(finished_at), status FROM runs ORDER BY started_at"
        ).fetchall()


def stage_table(wh: Path) -> str:
    """Each stage's seconds and the peak memory sampled while it ran (markdown), then the
    time before the first stage and after the last (Python's start, Prefect, the summary)."""
    rows = ["| stage | seconds | peak GB |", "| --- | ---: | ---: |"]
    spans = stage_spans(wh)
    for command, seconds, start, end, status in spans:
        inside = [b for t, b in SAMPLES if start <= t <= (end or SPAN[1])]
        peak = f"{max(inside) / 1e9:.2f}" if inside else "-"
        note = "" if status == "succeeded" else f" ({status})"
        rows.append(f"| {command}{note} | {seconds or 0:.1f} | {peak} |")
    if spans:
        rows.append(f"| before the first stage | {spans[0][2] - SPAN[0]:.1f} | |")
        rows.append(f"| after the last stage | {SPAN[1] - (spans[-1][3] or SPAN[1]):.1f} | |")
    return "\n".join(rows)


def results(wh: Path) -> dict[str, list]:
    """Every simulated and fleet figure, in a fixed order (run ids left out)."""
    queries = {
        "hit_rates": "SELECT tenant, policy, isolation, capacity_blocks, measure_window, "
        "requests, hit_tokens, input_tokens FROM hit_rates ORDER BY ALL",
        "fleet_hit_rates": "SELECT * EXCLUDE (run_id) FROM fleet_hit_rates ORDER BY ALL",
        "mrc": "SELECT * EXCLUDE (run_id) FROM mrc ORDER BY ALL",
        "plan": "SELECT * EXCLUDE (run_id, source_run_id) FROM plan ORDER BY ALL",
    }
    with duckdb.connect(str(wh), read_only=True) as con:
        return {name: con.execute(q).fetchall() for name, q in queries.items()}


def flow(trace: Path, wh: Path, env: dict[str, str], *extra: str) -> tuple[float, float]:
    for stale in (wh, wh.with_suffix(".duckdb.wal")):
        stale.unlink(missing_ok=True)
    cmd = [*CLI, "fleet-report", "--input", str(trace), "--tenant-field", "tenant"]
    cmd += ["--warehouse", str(wh), "--out", str(wh.with_suffix(".html")), *extra]
    return measured(cmd, env)


def show(label: str, wall: float, peak: float, wh: Path) -> None:
    parts = ", ".join(f"{c} {s:.1f}" for c, s in stages(wh))
    print(f"{label}: {wall:.1f} s, peak {peak:.2f} GB ({parts})")


def cluster(directory: Path, env: dict[str, str]) -> int:
    from distributed import LocalCluster

    trace = directory / "x20.jsonl"
    if not trace.exists():
        subprocess.run([sys.executable, str(TOOL), "20", str(trace)], check=True)
    here_wh, there_wh = directory / "here.duckdb", directory / "there.duckdb"
    here, peak_here = flow(trace, here_wh, env)
    show("in process", here, peak_here, here_wh)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as c:
        there, peak_there = flow(trace, there_wh, env, "--dask-address", c.scheduler_address)
    show("on 2 Dask workers", there, peak_there, there_wh)
    a, b = results(here_wh), results(there_wh)
    same = [name for name in a if a[name] == b[name]]
    print(f"same results: {', '.join(same)}; different: {', '.join(set(a) - set(same)) or '-'}")
    print(f"speed-up {here / there:.2f}x (needed: 1.6x)")
    return 0 if here / there >= 1.6 and len(same) == len(a) else 1


def week(directory: Path, env: dict[str, str]) -> int:
    trace = directory / "week.jsonl"
    if not trace.exists():
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks/make_week_trace.py"), str(trace)], check=True
        )
    wh = directory / "week.duckdb"
    wall, peak = flow(trace, wh, env, "--workers", "2")
    show("250 M lookups, 2 workers", wall, peak, wh)
    print(stage_table(wh))
    return 0 if wall < 600 and peak < 12 else 1


def slo_engines(directory: Path, env: dict[str, str]) -> int:
    from prefixscope.pipelines import parameters as flow

    wh = directory / "week.duckdb"
    deployments = ",".join(flow.DEFAULT_SLO_DEPLOYMENTS)
    settings = ["--slo", flow.DEFAULT_SLO, "--model", flow.DEFAULT_SLO_MODEL,
                "--deployments", deployments, "--disagg", flow.DEFAULT_SLO_LINK]  # fmt: skip
    cmd = [*CLI, "plan", "--warehouse", str(wh), *settings, "--workers", "2"]
    for engine in ("ideal", "vllm"):
        wall, peak = measured([*cmd, "--engine", engine], env)
        with duckdb.connect(str(wh), read_only=True) as con:
            gpus = con.execute(
                "SELECT prefix_caching, gpus FROM latest_plan_slo_answers ORDER BY ALL"
            ).fetchall()
        answer = ", ".join(f"{g} GPUs caching {'on' if c else 'off'}" for c, g in gpus)
        print(f"the flow's SLO plan on {engine}: {wall:.1f} s, peak {peak:.2f} GB ({answer})")
    return 0


def compile_first() -> None:
    """The fleet loop compiled (or loaded) from numba's cache before any timed run."""
    with tempfile.TemporaryDirectory(prefix="prefixscope-warm-") as tmp:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "tests.warm_kernels", str(Path(tmp) / "done")]
        subprocess.run(cmd, cwd=ROOT, check=True)
        print(f"the fleet loop compiled or loaded first: {time.perf_counter() - t0:.1f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--cluster", action="store_true", help="(default)")
    mode.add_argument("--week", action="store_true")
    mode.add_argument("--slo-engines", action="store_true")
    p.add_argument(
        "--dir", type=Path, help="where traces and warehouses are kept (default: removed at exit)"
    )
    args = p.parse_args()
    if args.slo_engines and (args.dir is None or not (args.dir / "week.duckdb").exists()):
        p.error("--slo-engines reads the week's warehouse that --week --dir DIR left in DIR")
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        return run(args.dir, args)
    # A week's trace and warehouse take about 5 GB: a run that keeps nothing leaves nothing.
    with tempfile.TemporaryDirectory(prefix="prefixscope-flow-") as tmp:
        return run(Path(tmp), args)


def run(directory: Path, args: argparse.Namespace) -> int:
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    from prefixscope.pipelines import settings

    os.environ.setdefault("PREFECT_HOME", str(directory / "prefect"))
    settings.apply_defaults()
    settings.quiet()
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start(timeout=120)
    env = {**os.environ, "PREFECT_API_URL": server.api_url}
    try:
        compile_first()
        if args.slo_engines:
            return slo_engines(directory, env)
        return week(directory, env) if args.week else cluster(directory, env)
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: one fleet configuration per router against one single-cache ``simulate`` run.

The 20-tenant benchmark trace (the bundled hour ×20, 5.77 M block lookups, made by
``shared/tools/make_bench_trace.py 20``) is ingested with ``prefixscope ingest --format
mooncake`` into a scratch warehouse and loaded once (trace and traffic, as the ``fleet`` stage
does). Then, on one core, best of 3 each:

- ``simulate``: one ``lru`` run of a single cache of 8 × C blocks (the fleet's total);
- every router at 8 replicas of C blocks each (C = 16,000 unless ``--capacity``), priced by the
  roofline of llama-3-8b on an H100;
- one configuration (session routing, 8 × C) under each engine: ``vllm`` (and ``sglang``)
  against ``ideal``; exit status 1 also when ``vllm`` takes 2× ``ideal``'s time or more.

Prints lookups, seconds, M lookups/s, token hit rate and the ratio to ``simulate``; the compile
time of the kernels (in a fresh process with an empty numba cache) and the peak memory. Exit
status 1 when ``kv-aware`` takes 5 s or more.

    make bench        # or: .venv/bin/python benchmarks/fleet_speed.py [--trace FILE.jsonl]

The trace's ``tenant`` field is not read (Mooncake ingest takes no ``--tenant-field``; every
request gets the default tenant): the copies differ by their ids, and no router reads tenants.

``--trace``: where the ×20 trace is kept; made there when absent, reused when present (by
default a temporary file, made afresh each run).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import one_core

from prefixscope import warehouse
from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.engines import ENGINES
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.fleet.run import Engine, Fleet, Traffic, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline, measured_step
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import subset
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TENANTS = 20
REPLICAS = 8
CAPACITY = 16_000  # blocks per replica
LIMIT_S = 5.0  # kv-aware, one configuration, one core
REPEATS = 3
WARM_REQUESTS = 300


def make_trace_tool() -> Path:
    for base in (ROOT.parent, ROOT):
        tool = base / "shared/tools/make_bench_trace.py"
        if tool.is_file():
            return tool
    sys.exit("shared/tools/make_bench_trace.py not found beside or inside the checkout")


def ensure_trace(path: Path) -> None:
    if path.is_file():
        print(f"trace: reusing {path}")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    tool = make_trace_tool()
    subprocess.run([sys.executable, str(tool), str(TENANTS), str(path)], check=True)
    print(
        f"trace: made {path} ({path.stat().st_size / 2**20:.0f} MiB) in "
        f"{time.perf_counter() - t:.1f} s"
    )


def ingest(trace_file: Path, db: Path) -> float:
    """``prefixscope ingest`` in its own process; returns its wall seconds."""
    t = time.perf_counter()
    subprocess.run(
        [
            str(BIN / "prefixscope"),
            "ingest",
            "--format",
            "mooncake",
            "--input",
            str(trace_file),
            "--warehouse",
            str(db),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t


def engine() -> Engine:
    return Engine(from_roofline(resolve_model("llama-3-8b"), resolve_gpu("h100")))


def warm_up(trace: Trace, traffic: Traffic) -> float:
    """Every kernel once on the first requests: compiles, or loads numba's cached machine code."""
    head = np.arange(min(WARM_REQUESTS, trace.n_requests))
    small, small_traffic = subset(trace, head), traffic.take(head)
    t = time.perf_counter()
    POLICIES["lru"].hit_blocks(small, 100)
    for router in ROUTERS:
        simulate_fleet(small, small_traffic, Fleet(router, REPLICAS, 100), engine())
    for kind in ENGINES:  # a pool holds the longest request: give it room
        simulate_fleet(
            small, small_traffic, Fleet("session", REPLICAS, 4_000, engine=kind), engine()
        )
    return time.perf_counter() - t


def cold_compile(db: Path) -> float:
    """The warm-up in a fresh process whose numba cache is empty: the compile time."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS="1")
        out = subprocess.run(
            [sys.executable, __file__, "--compile-only", str(db)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
    return float(out.split()[-1])


def best(fn, repeats: int = REPEATS) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", type=Path, help="the ×20 trace: reused if present, else made there")
    p.add_argument("--capacity", type=int, default=CAPACITY, help="blocks per replica")
    p.add_argument("--compile-only", metavar="DB", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.compile_only:  # the child of cold_compile
        with warehouse.reading(args.compile_only) as con:
            trace, traffic = load_trace(con), load_traffic(con)
        print(warm_up(trace, traffic))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        trace_file = args.trace or Path(tmp) / f"bench_x{TENANTS}.jsonl"
        ensure_trace(trace_file)
        db = Path(tmp) / "fleet.duckdb"
        t_ingest = ingest(trace_file, db)
        ingest_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
        t = time.perf_counter()
        with warehouse.reading(db) as con:
            trace, traffic = load_trace(con), load_traffic(con)
        t_load = time.perf_counter() - t
        t_compile = cold_compile(db)

    print(
        f"×{TENANTS} trace: {trace.n_requests:,} requests, {trace.n_lookups:,} block lookups, "
        f"{trace.n_unique:,} distinct blocks"
    )
    print(f"ingest (own process): {t_ingest:.1f} s, peak {ingest_rss:.2f} GiB")
    print(f"load trace + traffic: {t_load:.2f} s")
    print(f"compile, fresh numba cache (lru + fleet kernels): {t_compile:.1f} s")
    t_warm = warm_up(trace, traffic)
    print(f"warm-up here (numba cache load): {t_warm:.2f} s — excluded below")
    where = one_core()
    print(f"timing on one core ({where}), best of {REPEATS}; roofline llama-3-8b on h100")

    total = REPLICAS * args.capacity
    tokens = trace.input_tokens.sum()
    rows, seconds = [], {}
    sec, hits = best(lambda: POLICIES["lru"].hit_blocks(trace, total))
    base = sec
    rows.append((f"simulate lru, 1 cache × {total:,}", sec, hit_tokens(trace, hits).sum() / tokens))
    eng = engine()
    for router in ROUTERS:
        fleet = Fleet(router, REPLICAS, args.capacity)
        sec, out = best(lambda fleet=fleet: simulate_fleet(trace, traffic, fleet, eng))
        rows.append(
            (f"fleet {router}, {REPLICAS} × {args.capacity:,}", sec, out.hit_tokens.sum() / tokens)
        )  # type: ignore[attr-defined]
        seconds[router] = sec

    n = trace.n_lookups
    print(
        f"{'what':<40} {'lookups':>11} {'seconds':>8} {'M lookups/s':>12} {'hit rate':>9} "
        f"{'× simulate':>11}"
    )
    for what, sec, rate in rows:
        print(
            f"{what:<40} {n:>11,} {sec:>8.3f} {n / sec / 1e6:>12.1f} {rate:>9.4f} "
            f"{sec / base:>11.2f}"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS of this process (load, warm-up, every run): {peak:.2f} GiB")
    by_engine = {}
    for kind in ENGINES:
        fleet = Fleet("session", REPLICAS, args.capacity, engine=kind)
        sec, out = best(lambda fleet=fleet: simulate_fleet(trace, traffic, fleet, eng))
        by_engine[kind] = sec
        print(
            f"engine {kind:<7} session, {REPLICAS} × {args.capacity:,}: {sec:.3f} s, hit rate "
            f"{out.hit_tokens.sum() / tokens:.4f}, preemptions {int(out.preemptions.sum())}"  # type: ignore[attr-defined]
        )
    measured = Engine(measured_step(resolve_model("llama-3-8b"), resolve_gpu("h100"), 1, None)[0])
    for label, priced in (("roofline", eng), ("measured", measured)):
        fleet = Fleet("session", REPLICAS, args.capacity)
        sec, out = best(
            lambda fleet=fleet, priced=priced: simulate_fleet(trace, traffic, fleet, priced)
        )
        by_engine[label] = sec
        print(f"steps priced by the {label} model, session: {sec:.3f} s, TTFT p95 "
              f"{float(np.percentile(out.ttft, 95)):.2f} s")  # type: ignore[attr-defined]  # fmt: skip
    cost_ratio = by_engine["measured"] / by_engine["roofline"]
    print(
        f"measured / roofline: {cost_ratio:.2f}× — "
        f"{'within' if cost_ratio < 1.2 else 'NOT within'} 1.2×"
    )
    ratio = by_engine["vllm"] / by_engine["ideal"]
    print(f"vllm / ideal: {ratio:.2f}× — {'within' if ratio < 2 else 'NOT within'} 2×")
    kv = seconds["kv-aware"]
    print(
        f"kv-aware at {REPLICAS} replicas: {kv:.3f} s — {'under' if kv < LIMIT_S else 'NOT under'} "
        f"{LIMIT_S:g} s on one core"
    )
    return 0 if kv < LIMIT_S and ratio < 2 and cost_ratio < 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())

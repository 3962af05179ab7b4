"""Benchmark: the error of sampled LRU curves against the exact curve, by sampler.

For each trace and rate, each block sampler (``block-hot``, the default; ``block``;
``block-head``) estimates the curve at the 256 log-spaced capacities of its sample, and the exact
one-pass curve is read at the same full-scale capacities (``capacity / rate``). The table gives,
in points of token hit rate (window ``all``): the worst absolute error over the capacities for
the fleet, the fleet's error at the largest capacity (the working set, where the curve meets the
ceiling), and the worst over every tenant and capacity; and the share of the lookups the sample
kept. A second table runs the command itself (``prefixscope curve --sample-rate R``, in a fresh
process: the warehouse streamed, twice for ``block-hot``), the default and ``block``, and gives
the fleet error of the rows it wrote, its wall time and its peak memory.

Traces, each ingested into a temporary warehouse by the ``ingest`` stage:

- the bundled hour (``data/sample/mooncake``; one tenant);
- the 20- and 100-tenant benchmark traces: the bundled hour K times, interleaved, ids offset per
  copy except the shared first block (``../shared/tools/make_bench_trace.py K``; Mooncake, so the
  warehouse has one tenant: the tenants of the tables are the copies, read back from the ids);
- a synthetic Bailian trace (``prefixscope.synthetic``: four tenants, six system prompts each of
  up to 1,200 tokens after a preamble common to all, block size 16);
- the Zipf-family synthetic trace of ``benchmarks/mrc.py`` (25 M lookups; in memory).

    .venv/bin/python benchmarks/sampled_error.py            # all of them (about 5 minutes)
    .venv/bin/python benchmarks/sampled_error.py --quick    # without the 100-tenant trace
    .venv/bin/python benchmarks/sampled_error.py --draws 4  # and 4 more draws of the Zipf one
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from prefixscope import warehouse
from prefixscope.analysis.curves.block_sampling import sample_blocks
from prefixscope.analysis.curves.curve import capacity_points
from prefixscope.analysis.curves.exact import lru_curve
from prefixscope.analysis.curves.sampled import sampled_lru_curve
from prefixscope.analysis.curves.settings import BLOCK_RULES, DEFAULT_SAMPLE_BY, CurveSettings
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest
from prefixscope.synthetic import Workload, write_bailian

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data/sample/mooncake/conversation_trace.jsonl.gz"
MAKE_BENCH = ROOT.parent / "shared/tools/make_bench_trace.py"
SYNTHETIC = Workload(sessions=20_000, prompts_per_tenant=6, duration_s=4 * 3600.0)
RATES = (0.1, 0.01)
SAMPLERS = (DEFAULT_SAMPLE_BY, *(b for b in BLOCK_RULES if b != DEFAULT_SAMPLE_BY))


@dataclass(frozen=True)
class Row:
    trace: str
    rate: float
    by: str
    kept: float  # share of the lookups in the sample
    fleet_worst: float
    fleet_last: float
    tenant_worst: float
    seconds: float


def ingested(tmp: Path, name: str, inputs: list[Path], fmt: str, **options: object) -> Path:
    wh = tmp / f"{name}.duckdb"
    settings = ingest.IngestSettings(tuple(map(str, inputs)), fmt, IngestOptions(**options))
    ingest.ingest_logs(wh, settings)
    return wh


def loaded(wh: Path) -> Trace:
    with warehouse.reading(wh) as con:
        return load_trace(con)


def by_copy(trace: Trace, copy_ids: int) -> Trace:
    """A benchmark trace with each request's tenant the copy of the bundled hour it came from:
    copy ``i`` offsets every id but the shared root by ``i * copy_ids``."""
    values = trace.hashes[trace.blocks].astype(np.int64)
    copy = np.maximum.reduceat(values, trace.offsets[:-1]) // copy_ids
    return replace(
        trace,
        tenant_codes=copy.astype(np.int32),
        tenants=tuple(f"t{i:03d}" for i in range(int(copy.max()) + 1)),
    )


def measure(name: str, trace: Trace, rates: tuple[float, ...]) -> list[Row]:
    rows = []
    for rate in rates:
        runs = {}
        for by in SAMPLERS:
            rule = CurveSettings(sample_rate=rate, sample_by=by)
            t = time.perf_counter()
            sample = sample_blocks(trace, rate, rule.head, rule.hot)
            small = capacity_points(sample.trace.n_unique, 256)
            est = sampled_lru_curve(sample, small, ["all"])
            runs[by] = (sample, small, est, time.perf_counter() - t)
        full = {by: np.maximum(1, np.round(r[1] / rate).astype(np.int64)) for by, r in runs.items()}
        axis = np.unique(np.concatenate(list(full.values())))
        exact = {g.tenant: g for g in lru_curve(trace, axis, ["all"]).groups}
        for by, (sample, _, est, seconds) in runs.items():
            at = np.searchsorted(axis, full[by])
            err = {
                g.tenant: np.abs(
                    g.hit_tokens / g.input_tokens
                    - exact[g.tenant].hit_tokens[at] / exact[g.tenant].input_tokens[at]
                )
                for g in est.groups
            }
            fleet = err.pop(FLEET)
            rows.append(
                Row(
                    name,
                    rate,
                    by,
                    sample.trace.n_lookups / trace.n_lookups,
                    float(fleet.max()),
                    float(fleet[-1]),
                    max((float(e.max()) for e in err.values()), default=float("nan")),
                    seconds,
                )
            )
        print_rows(rows[-len(runs) :])
    return rows


def print_rows(rows: list[Row]) -> None:
    for r in rows:
        print(
            f"| {r.trace} | {r.rate:g} | {r.by} | {r.kept:.3f} | {100 * r.fleet_worst:.2f} | "
            f"{100 * r.fleet_last:.2f} | {100 * r.tenant_worst:.2f} | {r.seconds:.1f} |",
            flush=True,
        )


#: Runs the command in a fresh process and prints its peak resident memory (KiB) last: the
#: high-water mark of its own address space (``ru_maxrss`` would count the parent's pages at
#: the fork).
COMMAND = (
    "import re, sys; from pathlib import Path; from prefixscope.cli import main; "
    "rc = main(sys.argv[1:]); "
    "print(re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1)); "
    "sys.exit(rc)"
)


def through_the_command(name: str, wh: Path, trace: Trace, rate: float, by: str | None) -> str:
    """``prefixscope curve --sample-rate R [--sample-by BY]`` in a fresh process (the default
    sampler when ``by`` is None): its fleet error, read back from the ``mrc`` table, its wall
    time and peak memory. A row of the second table."""
    argv = ["curve", "--warehouse", str(wh), "--sample-rate", str(rate)]
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", COMMAND, *argv, *(["--sample-by", by] if by else [])],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    seconds = time.perf_counter() - t
    peak = int(out.split()[-1]) / 2**20  # KiB -> GiB
    by = by or DEFAULT_SAMPLE_BY
    with warehouse.reading(wh) as con:
        rows = con.execute(
            "SELECT capacity_blocks, token_hit_rate FROM mrc WHERE tenant = ? AND "
            "measure_window = 'all' AND sample_rate = ? AND sample_by = ? ORDER BY 1",
            [FLEET, rate, by],
        ).fetchall()
    caps = np.array([r[0] for r in rows])
    est = np.array([r[1] for r in rows])
    axis = np.unique(caps)
    fleet = next(g for g in lru_curve(trace, axis, ["all"]).groups if g.tenant == FLEET)
    exact = fleet.hit_tokens[np.searchsorted(axis, caps)] / fleet.input_tokens[0]
    err = np.abs(est - exact)
    return (
        f"| {name} | {rate:g} | {by} | {100 * err.max():.2f} | {100 * err[-1]:.2f} | "
        f"{100 * est[-1]:.2f} vs {100 * exact[-1]:.2f} | {seconds:.1f} | {peak:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="without the 100-tenant trace")
    parser.add_argument(
        "--draws",
        type=int,
        default=0,
        metavar="N",
        help="also N other draws of the sampled blocks of the Zipf-family trace (hashes shifted)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import mrc  # the Zipf-family generator

    print(
        "| trace | rate | sample by | kept | fleet worst | fleet at the largest capacity | "
        "worst tenant | seconds |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    )
    staged: list[str] = []  # the second table
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)

        def both(name: str, wh: Path, trace: Trace) -> None:
            measure(f"{name} ({trace.n_lookups / 1e6:.2f} M lookups)", trace, RATES)
            staged.extend(
                through_the_command(name, wh, trace, rate, by)
                for rate in RATES
                for by in (None, "block")
            )

        bundled_wh = ingested(tmp, "bundled", [SAMPLE], "mooncake")
        bundled = loaded(bundled_wh)
        both("bundled", bundled_wh, bundled)
        copy_ids = int(bundled.hashes.max()) + 1
        for k in (20,) if args.quick else (20, 100):
            jsonl = tmp / f"bench{k}.jsonl"
            subprocess.run([sys.executable, str(MAKE_BENCH), str(k), str(jsonl)], check=True)
            wh = ingested(tmp, f"bench{k}", [jsonl], "mooncake")
            jsonl.unlink()
            both(f"bench x{k}", wh, by_copy(loaded(wh), copy_ids))
        path = write_bailian(tmp / "synthetic.jsonl", SYNTHETIC, seed=7)
        wh = ingested(tmp, "synthetic", [path], "bailian", tenant_from="type")
        both("synthetic Bailian", wh, loaded(wh))
    zipf = mrc.synthetic(25_000_000)
    measure(f"synthetic Zipf families ({zipf.n_lookups / 1e6:.2f} M lookups)", zipf, RATES)
    for k in range(1, args.draws + 1):  # the same trace, another set of sampled blocks
        shifted = replace(zipf, hashes=zipf.hashes + np.uint64(k * 7919))
        measure(f"synthetic Zipf families, draw {k}", shifted, RATES)
    print(
        "\nThe command (`prefixscope curve --sample-rate R [--sample-by block]`, a fresh "
        "process; fleet):\n\n"
        "| trace | rate | sample by | worst | at the largest capacity | estimate vs exact there "
        "| seconds | peak RSS GiB |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
    )
    print("\n".join(staged))


if __name__ == "__main__":
    main()

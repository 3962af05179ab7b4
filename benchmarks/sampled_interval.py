"""Benchmark: how often a sampled curve's 95% interval holds the exact curve.

The bundled trace is ingested into a temporary warehouse; the exact LRU curve is computed at
every capacity from 1 block to the working set. For each rate, ``--draws`` independent block
samples are drawn (each with the block hashes xor-ed by a random constant first, so each is a
new draw of blocks; the trace's sharing is unchanged) and the sampled curve with its interval is
computed as ``prefixscope curve --sample-rate R`` computes it. Printed per rate and sampler: the
median sampled blocks (the fleet's), the share of (draw, capacity) rows whose interval holds the
exact token hit rate (window ``all``, fleet, capacities up to the working set), that share where
the sampled cache holds at least 100 blocks (R·C >= 100) and below, the mean width of the
interval, the mean absolute error of the estimate, and the worst draw's share.

    .venv/bin/python benchmarks/sampled_interval.py                 # block-hot, 20 draws
    .venv/bin/python benchmarks/sampled_interval.py --sample-by block --rates 0.1,0.01
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

from prefixscope import warehouse
from prefixscope.analysis.curves.block_sampling import sample_blocks
from prefixscope.analysis.curves.compute import compute
from prefixscope.analysis.curves.sampled import compute_sampled_curves
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.trace.load import load_trace
from prefixscope.stages import ingest

SAMPLE = Path(__file__).parent.parent / "data/sample/mooncake/conversation_trace.jsonl.gz"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="0.1,0.01,0.001,0.0001")
    p.add_argument("--sample-by", default="block-hot")
    p.add_argument("--draws", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wh = Path(tmp) / "wh.duckdb"
        ingest.ingest_logs(wh, ingest.IngestSettings((str(SAMPLE),), "mooncake"))
        with warehouse.reading(wh) as con:
            trace = load_trace(con)
    every = CurveSettings(points=2, capacities=tuple(range(1, trace.n_unique + 1)))
    exact = (
        pl.from_arrow(compute(trace, every))
        .filter(pl.col("tenant") == "*")
        .select("capacity_blocks", pl.col("token_hit_rate").alias("truth"))
    )
    for rate in (float(r) for r in args.rates.split(",")):
        settings = CurveSettings(sample_rate=rate, sample_by=args.sample_by)
        start = time.perf_counter()
        rows = []
        for d in range(args.draws):
            salt = np.uint64(np.random.default_rng(1000 + d).integers(1, 2**63))
            sample = sample_blocks(
                replace(trace, hashes=trace.hashes ^ salt), rate, settings.head, settings.hot
            )
            got = pl.from_arrow(compute_sampled_curves(sample, settings))
            fleet = got.filter(pl.col("tenant") == "*")  # type: ignore[union-attr]
            rows.append(fleet.join(exact, on="capacity_blocks").with_columns(draw=pl.lit(d)))
        j = pl.concat(rows).with_columns(
            inside=(pl.col("ci_low") <= pl.col("truth")) & (pl.col("truth") <= pl.col("ci_high")),
            width=pl.col("ci_high") - pl.col("ci_low"),
            err=(pl.col("token_hit_rate") - pl.col("truth")).abs(),
            large=pl.col("capacity_blocks") * rate >= 100,
        )
        worst = j.group_by("draw").agg(pl.col("inside").mean())["inside"].min()
        large, small = j.filter(pl.col("large")), j.filter(~pl.col("large"))

        def share(frame: pl.DataFrame) -> str:
            return "—" if frame.is_empty() else f"{frame['inside'].mean():.3f}"

        print(
            f"rate {rate:g} {args.sample_by}: {args.draws} draws, median "
            f"{int(j['sampled_blocks'].median()):,} sampled blocks, {j.height:,} rows: inside "
            f"{share(j)} (R·C >= 100: {share(large)}, below: {share(small)}), mean width "
            f"{j['width'].mean():.4f}, mean abs error {j['err'].mean():.4f}, worst draw "
            f"{worst:.3f} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()

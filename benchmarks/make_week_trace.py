"""A generated week of a mid-size fleet, from the bundled Kimi hour: ``--copies`` copies of the
hour (default 866: 10.4 M requests, 250 M block lookups), each the traffic of one tenant's
deployment for an hour, their starts spread evenly over ``--hours`` (default 168: a week, so
about five copies overlap at any time), copy ``i`` owned by tenant ``t{i mod --tenants}``
(default 50). Ids are offset per copy, except the first block, which every copy shares (a
common system prompt), as in ``shared/tools/make_bench_trace.py``.

Writes Mooncake JSONL with a ``tenant`` field (ingest with ``--tenant-field tenant``), in time
order, with polars, in about a minute for the default size.

    .venv/bin/python benchmarks/make_week_trace.py OUT.jsonl [--copies 866] [--tenants 50]
"""

from __future__ import annotations

import argparse
import gzip
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

SAMPLE = Path(__file__).resolve().parent.parent / "data/sample/mooncake/conversation_trace.jsonl.gz"


def week(copies: int, tenants: int, hours: float) -> pl.DataFrame:
    with gzip.open(SAMPLE) as f:
        base = pl.read_ndjson(f.read())
    span_ms = hours * 3_600_000
    ids = base["hash_ids"]
    top = int(ids.explode().max()) + 1
    lengths = ids.list.len().to_numpy().astype(np.int64)
    flat = ids.explode().drop_nulls().to_numpy().astype(np.int64)
    offsets = np.r_[0, np.cumsum(lengths)]
    n = len(base)
    starts = (np.arange(copies) * (span_ms / copies)).astype(np.int64)
    # every copy's rows: (copy, row) in time order of (start + timestamp)
    ts = (starts[:, None] + base["timestamp"].to_numpy()[None, :]).ravel()
    order = np.argsort(ts, kind="stable")
    copy_of, row_of = np.divmod(order, n)
    # the ids of each output row: the base row's, offset by copy (but block 0, shared)
    row_lengths = lengths[row_of]
    out_offsets = np.r_[0, np.cumsum(row_lengths)]
    gather = np.repeat(offsets[row_of] - out_offsets[:-1], row_lengths) + np.arange(
        out_offsets[-1]
    )
    values = flat[gather]
    shift = np.repeat(copy_of.astype(np.int64) * top, row_lengths)
    values = np.where(values == 0, 0, values + shift)
    lists = pa.ListArray.from_arrays(pa.array(out_offsets, pa.int64()).cast(pa.int32()), values)
    tenant_of = np.array([f"t{c % tenants:02d}" for c in range(copies)])
    return pl.DataFrame(
        {
            "timestamp": ts[order],
            "input_length": base["input_length"].to_numpy()[row_of],
            "output_length": base["output_length"].to_numpy()[row_of],
            "hash_ids": pl.Series(lists),
            "tenant": tenant_of[copy_of],
        }
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--copies", type=int, default=866)
    p.add_argument("--tenants", type=int, default=50)
    p.add_argument("--hours", type=float, default=168.0)
    args = p.parse_args()
    t0 = time.perf_counter()
    frame = week(args.copies, args.tenants, args.hours)
    frame.write_ndjson(args.out)
    lookups = int(frame["hash_ids"].list.len().sum())
    print(
        f"{args.out}: {len(frame):,} requests, {lookups:,} lookups, {args.tenants} tenants, "
        f"{args.hours:g} h, in {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()

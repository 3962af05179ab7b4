"""Hit rates as a short text table, for terminals and logs."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from prefixscope.warehouse import FLEET

#: Above this many tenants a terminal table shows the fleet rows only.
MAX_TENANTS_SHOWN = 6


def format_hit_rates(table: pa.Table) -> str:
    """``hit_rates`` rows grouped by window, fleet first, then by policy and capacity."""
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    if df.filter(pl.col("tenant") != FLEET)["tenant"].n_unique() > MAX_TENANTS_SHOWN:
        df = df.filter(pl.col("tenant") == FLEET)
    df = df.sort(
        [
            pl.col("measure_window"),
            pl.col("tenant") != FLEET,
            pl.col("tenant"),
            pl.col("policy"),
            pl.col("capacity_blocks"),
        ],
        nulls_last=False,
    )
    lines = [
        f"{'window':<10} {'tenant':<12} {'policy':<8} {'capacity':>12} {'requests':>9} "
        f"{'token hit':>9} {'req hit':>8}"
    ]
    for r in df.iter_rows(named=True):
        cap = "inf" if r["capacity_blocks"] is None else f"{r['capacity_blocks']:,} blk"
        tenant = "fleet" if r["tenant"] == FLEET else r["tenant"][:12]
        lines.append(
            f"{r['measure_window']:<10} {tenant:<12} {r['policy']:<8} {cap:>12} "
            f"{r['requests']:>9,} {r['token_hit_rate']:>9.4f} {r['request_hit_rate']:>8.4f}"
        )
    return "\n".join(lines)

"""The block-size what-if on the page: the fleet's token hit rate at each simulated block size,
side by side, for the same cache memory (``simulate --block-size``)."""

from __future__ import annotations

from typing import Any

import polars as pl

from prefixscope.analysis.trace.measure import FLEET


def block_size_table(rates: pl.DataFrame, window: str = "all") -> dict[str, Any] | None:
    """Rows (policy, isolation, capacity in tokens) × columns (block sizes), from the fleet's
    ``latest_hit_rates`` rows over ``window`` (else the first window there); None when only
    one block size was simulated. A capacity given in blocks or tokens is the same memory at
    every size, so the i-th capacity of a policy lines up across sizes."""
    fleet = rates.filter((pl.col("tenant") == FLEET) & pl.col("capacity_blocks").is_not_null())
    sizes = sorted(fleet["block_size"].unique().to_list())
    if len(sizes) < 2:
        return None
    windows = fleet["measure_window"].unique().to_list()
    fleet = fleet.filter(pl.col("measure_window") == (window if window in windows else windows[0]))
    rows = []
    for (policy, isolation), part in fleet.group_by(["policy", "isolation"], maintain_order=True):
        by_size = {
            s: part.filter(pl.col("block_size") == s).sort("capacity_tokens").to_dicts()
            for s in sizes
        }
        for i, first in enumerate(by_size[sizes[0]]):
            rates_i = [
                f"{by_size[s][i]['token_hit_rate']:.2%}"
                if i < len(by_size[s]) and by_size[s][i]["token_hit_rate"] is not None
                else "—"
                for s in sizes
            ]
            rows.append(
                {
                    "policy": policy,
                    "isolation": isolation,
                    "tokens": f"{first['capacity_tokens']:,}",
                    **{f"size_{s}": x for s, x in zip(sizes, rates_i, strict=True)},
                }
            )
    columns = [("policy", "policy", True), ("isolation", "isolation", True),
               ("tokens", "capacity (tokens)", False)]  # fmt: skip
    columns += [(f"size_{s}", f"{s}-token blocks", False) for s in sizes]
    return {
        "sizes": sizes,
        "columns": columns,
        "rows": rows,
        "window": fleet["measure_window"][0],
    }

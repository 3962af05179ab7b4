"""Stage ``compare``: two warehouses of the same logs side by side, before and after a what-if
(docs/ingest.md, "Restructuring prompts"): the hit rates of the configurations both simulated,
and what the cache saves where both priced it, per tenant.

It only reads: nothing is written and no run is recorded. A configuration is matched on every
key of its view (``latest_hit_rates``: tenant, policy and options, isolation, capacity, block
size, window; ``latest_savings``: tenant, policy, isolation, capacity, model, GPU, deployment,
cost model); one only one warehouse holds is counted, not shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from prefixscope import sql, warehouse
from prefixscope.terminal import shell_word

HIT_KEYS = (
    "tenant", "policy", "policy_options", "isolation", "capacity_blocks", "block_size",
    "measure_window",
)  # fmt: skip
HIT_VALUES = ("token_hit_rate", "ceiling_token_hit_rate")
SAVINGS_KEYS = (
    "tenant", "policy", "isolation", "capacity_blocks", "model", "gpu", "deployment", "cost_model",
)  # fmt: skip
SAVINGS_VALUES = (
    "prefill_gpu_seconds_with_cache",
    "gpu_seconds_saved_per_hour",
    "ttft_p50_with_cache_s",
    "ttft_p95_with_cache_s",
)


@dataclass(frozen=True)
class Comparison:
    """Each matched configuration's values ``<name>_before`` and ``<name>_after``."""

    hit_rates: pl.DataFrame
    savings: pl.DataFrame
    unmatched_hit_rates: int  # configurations one warehouse alone holds
    unmatched_savings: int


def _read(path: Path, query: str) -> pl.DataFrame:
    with warehouse.reading(path) as con:
        return con.sql(sql.load(query)).pl()


def _side_by_side(
    before: pl.DataFrame, after: pl.DataFrame, keys: tuple[str, ...], values: tuple[str, ...]
) -> tuple[pl.DataFrame, int]:
    b = before.select(*keys, *(pl.col(v).alias(f"{v}_before") for v in values))
    a = after.select(*keys, *(pl.col(v).alias(f"{v}_after") for v in values))
    both = b.join(a, on=list(keys), how="inner", nulls_equal=True)
    unmatched = before.height + after.height - 2 * both.height
    order = [k for k in keys if k != "tenant"]
    both = both.sort(
        [*order, pl.col("tenant") != "*", "tenant"], nulls_last=False, maintain_order=True
    )
    return both, unmatched


def compare_warehouses(before: str | Path, after: str | Path) -> Comparison:
    """The two warehouses' matched configurations (the module docstring). ValueError, in one
    line, when a warehouse holds no hit rates (nothing was simulated on it)."""
    read = {}
    for name, path in (("before", Path(before)), ("after", Path(after))):
        hits = _read(path, "compare/hit_rates")
        if hits.is_empty():
            raise ValueError(
                f"{path} holds no hit rates — run `prefixscope simulate --warehouse "
                f"{shell_word(str(path))}` (or fleet-report) on the {name} warehouse first"
            )
        read[name] = hits, _read(path, "compare/savings")
    hits, unmatched_hits = _side_by_side(read["before"][0], read["after"][0], HIT_KEYS, HIT_VALUES)
    savings, unmatched_savings = _side_by_side(
        read["before"][1], read["after"][1], SAVINGS_KEYS, SAVINGS_VALUES
    )
    return Comparison(hits, savings, unmatched_hits, unmatched_savings)

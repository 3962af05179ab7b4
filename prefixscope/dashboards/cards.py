"""The page's headline figures, under the answer: a few cards, each a figure and what it is.

Every figure is the fleet's over the whole trace (window ``all``, as the planner and the savings
measure it), from the views ``trace_summary``, ``latest_hit_rates``, ``latest_savings`` and
``latest_plan``; a card whose view is empty is left out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.views import read_view, trace_summary

WINDOW = "all"
#: The policy told when nothing was priced.
LEAD_POLICY = "lru"


@dataclass(frozen=True)
class Card:
    figure: str
    what: str
    id: str


def headline_cards(con: duckdb.DuckDBPyConnection) -> list[Card]:
    """The cards for the warehouse behind ``con``, in reading order."""
    summary = trace_summary(con)
    tenants = summary["tenants"]
    cards = [
        Card(
            f"{summary['requests']:,}",
            f"requests from {tenants:,} tenant{'s' if tenants != 1 else ''}, "
            f"{summary['input_tokens']:,} input tokens",
            "card-requests",
        )
    ]
    rates = read_view(con, "latest_hit_rates").filter(
        (pl.col("tenant") == FLEET)
        & (pl.col("measure_window") == WINDOW)
        & (pl.col("isolation") == "shared")
        & pl.col("policy_options").is_null()
    )
    savings = read_view(con, "latest_savings").filter(pl.col("tenant") == FLEET)
    priced = savings.row(0, named=True) if savings.height else None
    ceiling = rates.filter(pl.col("capacity_blocks").is_null() & (pl.col("policy") == "ceiling"))
    if ceiling.height and ceiling["token_hit_rate"][0] is not None:
        cards.append(
            Card(
                f"{ceiling['token_hit_rate'][0]:.1%}",
                "of prompt tokens hit a cache that never evicts (the ceiling)",
                "card-ceiling",
            )
        )
    lead = _lead(rates, priced)
    if lead is not None:
        cards.append(
            Card(
                f"{lead['token_hit_rate']:.1%}",
                f"token hit rate of {lead['policy']} at {lead['capacity_blocks']:,} blocks "
                f"({lead['capacity_tokens'] / 1e6:,.1f} M tokens)",
                "card-policy",
            )
        )
    if priced is not None:
        per_hour = priced["gpu_seconds_saved_per_hour"]
        share = "" if priced["saved_share"] is None else f" ({priced['saved_share']:.0%})"
        saved, what = (
            (priced["gpu_seconds_saved"], "prefill GPU-seconds saved")
            if per_hour is None
            else (per_hour, "prefill GPU-seconds saved an hour")
        )
        usd = priced.get("usd_saved_per_hour")
        if usd is not None:
            what += f", ${usd:,.2f} of GPU time"
        cards.append(Card(f"{saved:,.0f}", what + share, "card-saved"))
        cards.append(
            Card(
                f"{priced['ttft_p95_no_cache_s'] * 1e3:,.0f} → "
                f"{priced['ttft_p95_with_cache_s'] * 1e3:,.0f} ms",
                "TTFT p95 (prefill alone), no cache → with the cache",
                "card-ttft",
            )
        )
    fleet = [
        r
        for r in read_view(con, "latest_plan").iter_rows(named=True)
        if r["tenant"] == FLEET and r["kind"] == "configuration" and r["reached"]
    ]
    if fleet and fleet[0]["cost_per_hour"] is not None:
        r = fleet[0]
        cards.append(
            Card(
                f"${r['cost_per_hour']:,.2f}/h",
                f"the cheapest simulated fleet that reaches the target: {r['replicas']} "
                f"replicas, {r['router']} routing",
                "card-fleet",
            )
        )
    return cards


def _lead(rates: pl.DataFrame, priced: dict[str, Any] | None) -> dict[str, Any] | None:
    """The priced configuration's row, else the lead policy at its middle capacity."""
    if priced is not None and priced["capacity_blocks"] is not None:
        found = rates.filter(
            (pl.col("policy") == priced["policy"])
            & (pl.col("capacity_blocks") == priced["capacity_blocks"])
        )
        if found.height:
            return found.row(0, named=True)
    lead = rates.filter(
        (pl.col("policy") == LEAD_POLICY) & pl.col("capacity_blocks").is_not_null()
    ).sort("capacity_blocks")
    if lead.is_empty() or lead["token_hit_rate"][lead.height // 2] is None:
        return None
    return lead.row(lead.height // 2, named=True)

"""The fleet section's miss budget (``latest_miss_budget``): for the group of configurations
the fleet selector picks, one stacked bar per router, every prompt token in one part, and in
the title the lever that would win back the most tokens. The fleet's rows, in the window each
configuration's other charts show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import plotly.graph_objects as go
import polars as pl
from markupsafe import Markup

from prefixscope.analysis.fleet.budget import KEYS, top_lever
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.figures import base_layout, figure_markup, plotly_text, selectable
from prefixscope.dashboards.views import has_view, read_view

#: Every part in the order it is stacked (hits first), its label and colour.
PARTS = (
    ("hit_hbm", "hit (HBM)", "#2ca02c"),
    ("hit_dram", "hit (DRAM)", "#98df8a"),
    ("hit_store", "hit (store)", "#bcbd22"),
    ("never_seen", "never seen (workload)", "#7f7f7f"),
    ("always_computed", "always computed", "#c7c7c7"),
    ("other_replica", "on another replica (router)", "#1f77b4"),
    ("stale_router_view", "stale router view (fresher routing)", "#17becf"),
    ("evicted", "evicted (memory)", "#ff7f0e"),
    ("behind_a_miss", "behind a miss (policy)", "#9467bd"),
    ("not_yet_cached", "not yet cached (load)", "#d62728"),
    ("slower_tier_recomputed", "slower tier recomputed", "#e377c2"),
)


def read_budget(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """``latest_miss_budget``, empty in a warehouse older than the view."""
    return (
        read_view(con, "latest_miss_budget")
        if has_view(con, "latest_miss_budget")
        else pl.DataFrame()
    )


def budget_chart(
    budget: pl.DataFrame, groups: Sequence[pl.DataFrame], titles: Sequence[str]
) -> Markup | None:
    """One stacked bar per router of each group (``groups``: the fleet section's rows, one per
    configuration in its chosen window), behind the fleet selector; None without a budget."""
    if budget.is_empty():
        return None
    budget = budget.filter(pl.col("tenant") == FLEET)
    fig = go.Figure()
    by_group = {}
    for g, rows in enumerate(groups):
        mine = _of_group(budget, rows)
        if mine.is_empty():
            continue
        routers = rows["router"].to_list()
        labels = [plotly_text(f"{r}") for r in routers]
        share = {(r["router"], r["part"]): r["share"] or 0.0 for r in mine.iter_rows(named=True)}
        for part, label, colour in PARTS:
            values = [share.get((r, part), 0.0) for r in routers]
            if not any(values):
                continue
            fig.add_trace(
                go.Bar(
                    y=labels,
                    x=values,
                    orientation="h",
                    name=label,
                    meta={"fleet": g},
                    marker={"color": colour},
                    legendgroup=part,
                    hovertemplate=f"%{{y}}: {plotly_text(label)} %{{x:.2%}} of the prompt "
                    "tokens<extra></extra>",
                )  # fmt: skip
            )
        by_group[str(g)] = f"Where the prompt tokens went: {lever_words(mine)}"
    if not fig.data:
        return None
    fig.update_layout(base_layout("", "share of the prompt tokens", height=320), barmode="stack")
    fig.update_xaxes(tickformat=".0%", range=[0, 1])
    fig.update_yaxes(title="router", tickformat="", rangemode="normal", autorange="reversed")
    for g in range(len(titles)):
        by_group.setdefault(str(g), "Where the prompt tokens went: no budget for this fleet")
    return figure_markup(selectable(fig, ["fleet"], by_group))


def _of_group(budget: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """The budget rows of the group's configurations, each in the window its row shows."""
    keys = [k for k in KEYS if k in rows.columns and k in budget.columns]
    wanted = rows.select(*keys, "measure_window")
    return budget.join(wanted, on=[*keys, "measure_window"], how="semi", nulls_equal=True)


def worth(row: dict[str, Any]) -> str:
    """A part's GPU-seconds, as words in brackets ("" where it was not priced)."""
    return "" if row.get("gpu_seconds") is None else f" ({row['gpu_seconds']:,.0f} GPU-s)"


def lever_words(rows: pl.DataFrame) -> str:
    """The part with a lever that holds the most tokens under some router of the group, as
    words: "most to win back: the router, 18.1% of the tokens under round-robin"."""
    best = top_lever(rows)
    if best is None:
        return "every token served or never seen"
    return (
        f"most to win back: {best['lever']}, {best['share']:.1%} of the tokens{worth(best)} under "
        f"{best['router']}"
    )


#: What each lever's part is, as the headline says it.
LEVER_WORDS = {
    "router": "sent to a replica that did not hold them (the router)",
    "memory": "evicted (memory)",
    "load": "asked for before any replica had computed them (load)",
    "eviction policy": "cached behind an uncached block (the eviction policy)",
    "faster tier": "held in a tier slower to copy from than to recompute (a faster tier)",
    "fresher routing": "held where a router with a fresh view would have sent them (fresher "
    "routing)",
}


def budget_headline(budget: pl.DataFrame) -> str | None:
    """One sentence for the top of the hit-rate section: of every fleet configuration
    simulated (window ``all`` where there is one), the part with a lever that holds the most
    prompt tokens, and the workload's floor beside it; None without a budget."""
    if budget.is_empty():
        return None
    rows = budget.filter(pl.col("tenant") == FLEET)
    windows = rows["measure_window"].unique().to_list()
    rows = rows.filter(pl.col("measure_window") == ("all" if "all" in windows else windows[0]))
    floor = rows.filter(pl.col("part") == "never_seen")["share"].drop_nulls()
    never = f" {floor.min():.1%} to {floor.max():.1%}" if floor.len() else ""
    if floor.len() and floor.min() == floor.max():
        never = f" {floor.min():.1%}"
    tail = f" The workload's own floor, prompt tokens no earlier prompt named:{never}."
    best = top_lever(rows)
    if best is None:
        return "In every fleet simulated, each prompt token was served or never seen." + tail
    return (
        f"The most prompt tokens to win back in the fleets simulated: {best['share']:.1%}"
        f"{worth(best)}, {LEVER_WORDS[best['lever']]}, under {best['router']} at "
        f"{best['replicas']} × {best['capacity_blocks']:,} blocks ({best['engine']} engine, "
        f"load ×{best['load_scale']:g})." + tail
    )

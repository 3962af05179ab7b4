"""Whether a memory tier pays for itself: per fleet configuration with a DRAM tier or a shared
store, the GPU dollars its hits save an hour against the tier's own price (``fleet_hit_rates``:
``tier_usd_saved_per_hour``, ``tier_usd_per_hour``, ``tier_net_usd_per_hour``, ``tier_gib``).

One sentence for the CLI, the page and the planner, and one chart for the page: the net against
what the fleet buys of the tier, one line per fleet without it (router, replicas, deployment,
capacity, load, engine), the break-even at 0.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl
from markupsafe import Markup

from prefixscope.dashboards.figures import PALETTE, base_layout, figure_markup, plotly_text
from prefixscope.dashboards.savings import dollars

#: What a tier is compared within: the fleet as it would be without the tier.
BASE = ("router", "replicas", "capacity_blocks", "deployment", "load_scale", "engine", "policy")


def tiered(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``rows`` (one per configuration, the fleet's) that buy a tier and price it."""
    if "tier_net_usd_per_hour" not in rows.columns:
        return rows.clear()
    return rows.filter(
        (pl.col("tier_gib").fill_null(0.0) > 0) & pl.col("tier_net_usd_per_hour").is_not_null()
    )


def tier_name(r: dict[str, Any]) -> str:
    """The tiers of a row in words: "a 64 GiB DRAM tier per replica and a 1,024 GiB store"."""
    parts = []
    if r.get("dram_blocks"):
        size = f"{r['dram_gib']:,g} GiB" if r.get("dram_gib") else f"{r['dram_blocks']:,}-block"
        parts.append(f"a {size} DRAM tier per replica")
    if r.get("store_unbounded"):
        parts.append("an unbounded store")
    elif r.get("store_blocks") is not None:
        size = f"{r['store_gib']:,g} GiB" if r.get("store_gib") else f"{r['store_blocks']:,}-block"
        parts.append(f"a {size} store")
    return " and ".join(parts) or "no tier"


def tier_verdict(rows: pl.DataFrame) -> str:
    """Per load scale, one sentence: which tiers simulated pay for themselves at that load and
    the best net, or that none does and the closest; "" when no row prices a tier."""
    t = tiered(rows)
    if t.is_empty():
        return ""
    if "load_scale" not in t.columns or t["load_scale"].n_unique() == 1:
        return _verdict(t)
    return " ".join(
        f"At {scale:g}× the load: {_verdict(t.filter(pl.col('load_scale') == scale))}"
        for scale in sorted(t["load_scale"].unique().to_list())
    )


def _verdict(t: pl.DataFrame) -> str:
    """The sentence of one load's tiered rows."""
    best = t.sort("tier_net_usd_per_hour", descending=True, maintain_order=True).row(0, named=True)
    net = best["tier_net_usd_per_hour"]
    saves, costs = best["tier_usd_saved_per_hour"], best["tier_usd_per_hour"]
    paying = t.filter(pl.col("tier_net_usd_per_hour") > 0)
    if paying.is_empty():
        return (
            f"No tier simulated pays for itself at this load: the closest, {tier_name(best)}, "
            f"saves {dollars(saves)} of GPU time an hour and costs {dollars(costs)} "
            f"(net {dollars(net)})."
        )
    smallest = paying.sort("tier_gib", maintain_order=True).row(0, named=True)
    return (
        f"{paying.height} of {t.height} tiers simulated pay for themselves at this load, the "
        f"smallest {tier_name(smallest)} (net {dollars(smallest['tier_net_usd_per_hour'])} an "
        f"hour); the best, {tier_name(best)}, saves {dollars(saves)} of GPU time an hour for "
        f"{dollars(costs)}: net {dollars(net)}."
    )


def tier_chart(rows: pl.DataFrame) -> Markup | None:
    """Net dollars an hour against the tier GiB the fleet buys: a line per fleet without its
    tier, a labelled point per tier; None when no row prices a tier."""
    t = tiered(rows)
    if t.is_empty():
        return None
    keys = [k for k in BASE if k in t.columns]
    fig = go.Figure()
    for i, (key, group) in enumerate(t.sort("tier_gib").group_by(keys, maintain_order=True)):
        spec = dict(zip(keys, key, strict=True))
        name = f"{spec['replicas']} × {spec.get('deployment') or ''} {spec['router']}".strip()
        if spec.get("load_scale", 1) != 1:
            name += f", load ×{spec['load_scale']:g}"
        if spec.get("engine") not in (None, "ideal"):
            name += f", {spec['engine']}"
        fig.add_trace(
            go.Scatter(
                x=group["tier_gib"].to_list(),
                y=group["tier_net_usd_per_hour"].to_list(),
                mode="lines+markers",
                name=plotly_text(name),
                line={"color": PALETTE[i % len(PALETTE)]},
                customdata=[
                    [plotly_text(tier_name(r)), r["tier_usd_saved_per_hour"],
                     r["tier_usd_per_hour"]]
                    for r in group.iter_rows(named=True)
                ],  # fmt: skip
                hovertemplate="%{customdata[0]}: saves $%{customdata[1]:,.2f}/h, costs "
                "$%{customdata[2]:,.2f}/h, net $%{y:,.2f}/h<extra>%{fullData.name}</extra>",
            )
        )
    fig.add_hline(y=0, line_dash="dot", line_color="#999")
    wide = t["tier_gib"].max() > 20 * t["tier_gib"].min()
    fig.update_layout(
        base_layout("Net $ an hour of each tier", "tier GiB the fleet buys", log_x=wide, height=320)
    )
    fig.update_yaxes(
        title="GPU $ saved − tier $, an hour", tickformat="$,.2f", rangemode="normal"
    )
    return figure_markup(fig)

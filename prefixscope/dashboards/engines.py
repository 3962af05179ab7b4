"""Hit rate against load by engine, on the page: where the fleet runs were simulated under
engines' schedulers (``fleet --engine``) at several load scales, the fleet's token hit rate at
each load, a line per engine; the blocks running requests held (``running_blocks_*``: what the
prefix cache had to give up) in the hover. None for warehouses without an ``engine`` column or
with one load scale."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.figures import (
    PALETTE,
    base_layout,
    figure_markup,
    plotly_text,
    selectable,
)

#: One fleet a line follows across loads (with the engine).
FLEET_KEY = ("router", "replicas", "capacity_blocks", "policy")
#: The engines' colours on this chart; others follow PALETTE.
ENGINE_COLOURS = {"ideal": "#555555", "vllm": "#1f77b4", "sglang": "#d62728"}


def engine_figure(rates: pl.DataFrame) -> dict[str, Any] | None:
    """The chart and its selector's options (one per fleet), from ``latest_fleet_hit_rates``."""
    if "engine" not in rates.columns:
        return None
    rows = rates.filter(
        (pl.col("tenant") == FLEET)
        & (pl.col("measure_window") == "all")
        & pl.col("token_hit_rate").is_not_null()
    )
    if rows["load_scale"].n_unique() < 2 or rows.is_empty():
        return None
    extra = [c for c in ("running_blocks_mean", "running_blocks_p95", "preemptions")
             if c in rows.columns]  # fmt: skip
    fig = go.Figure()
    options = []
    engines = sorted(rows["engine"].drop_nulls().unique().to_list())
    for f, (key, fleet) in enumerate(rows.group_by(list(FLEET_KEY), maintain_order=True)):
        router, replicas, capacity, policy = key
        options.append(f"{router}, {replicas} replicas × {capacity:,} blocks, {policy}")
        for engine in engines:
            line = fleet.filter(pl.col("engine") == engine).sort("load_scale")
            if line.is_empty():
                continue
            label = plotly_text(str(engine))
            colour = ENGINE_COLOURS.get(str(engine), PALETTE[engines.index(engine) % 7])
            fig.add_trace(
                go.Scatter(
                    x=line["load_scale"].to_list(),
                    y=line["token_hit_rate"].to_list(),
                    customdata=line.select(extra).rows() if extra else None,
                    mode="lines+markers",
                    name=label,
                    meta={"engfleet": f},
                    line={"color": colour},
                    hovertemplate="load ×%{x:g}: %{y:.2%}"
                    + _hover(extra)
                    + f"<extra>{label}</extra>",
                )
            )
    fig.update_layout(base_layout("", "load scale (× the logged arrival rate)", height=400))
    fig.update_layout(legend={"title": "engine"})
    titles = {str(i): f"Token hit rate against load, by engine — {o}" for i, o in
              enumerate(options)}  # fmt: skip
    return {"options": options, "chart": figure_markup(selectable(fig, ["engfleet"], titles))}


def _hover(extra: list[str]) -> str:
    words = {
        "running_blocks_mean": "running requests held %{customdata[I]:,.0f} blocks (mean)",
        "running_blocks_p95": "%{customdata[I]:,.0f} (p95)",
        "preemptions": "%{customdata[I]:,} preemptions",
    }
    return "".join(", " + words[c].replace("[I]", f"[{i}]") for i, c in enumerate(extra))

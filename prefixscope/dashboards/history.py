"""The trend across runs: the fleet's and each tenant's token hit rate, prefill GPU-seconds saved
per hour and effective capacity, one point per run, the newest run marked.

Reads the ``run_history`` view (the last 30 runs per tenant; its comment defines a run and the
configuration a trend follows); ``templates/history.html`` lays it out. The effective capacity
(the capacity whose simulation best explains the engines' reported cached tokens) is the
``validate`` command's: the fleet's row of its ``validation`` table over the same data
(``run_history`` joins it), for the fleet alone (tenants share the fleet's cache). Without a
validate run over a run's data, that chart is left out.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import duckdb
import plotly.graph_objects as go
import polars as pl
from markupsafe import Markup

from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.figures import PALETTE, base_layout, figure_markup, plotly_text
from prefixscope.dashboards.views import read_view

#: Tenants drawn at first (by the newest run's order); the others are a click on the legend away.
TENANTS_SHOWN = 8
#: What each chart plots: (column, title, y-axis title, y tick format).
TRENDS = (
    ("token_hit_rate", "Token hit rate across runs", "token hit rate", ".0%"),
    ("gpu_seconds_saved_per_hour", "Prefill GPU-seconds saved per hour across runs",
     "GPU-s saved per hour", ",.0f"),
    ("effective_capacity_blocks", "Effective capacity across runs (validate)",
     "effective capacity (blocks)", ",.0f"),
)  # fmt: skip
#: The time axis either side of a lone run.
ONE_RUN_SPAN = timedelta(hours=1)


def history_section(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """What ``templates/history.html`` shows: the charts of every trend with a value, the number
    of runs and the configuration followed; None before any run."""
    rows = read_view(con, "run_history")
    if rows.is_empty():
        return None
    latest = rows.row(0, named=True)  # newest run first, its fleet row first
    figures = [
        trend_figure(rows, column, title, y_title, ticks, latest["run_id"])
        for column, title, y_title, ticks in TRENDS
        if rows[column].null_count() < rows.height
    ]
    followed = rows.select(_configuration_expr()).unique().height
    return {
        "runs": rows["run_id"].n_unique(),
        "configuration": _configuration(latest),
        "changed": followed > 1,
        "this_run": f"{latest['run_at']:%Y-%m-%d %H:%M} UTC",
        "figures": figures,
    }


def trend_figure(
    rows: pl.DataFrame, column: str, title: str, y_title: str, ticks: str, latest_run: str
) -> Markup:
    """A line per tenant (the fleet's bold) over the runs' start times; a star, in the line's
    colour, on each of the newest run's points."""
    fig = go.Figure()
    rows = rows.with_columns(configuration=_configuration_expr())
    tenants = rows["tenant"].unique(maintain_order=True).to_list()
    color = {t: PALETTE[i % len(PALETTE)] for i, t in enumerate(tenants)}
    for i, tenant in enumerate(tenants):
        line = rows.filter(pl.col("tenant") == tenant).sort("run_at")
        label = plotly_text("fleet" if tenant == FLEET else f"tenant {tenant}")
        fig.add_trace(
            go.Scatter(
                x=line["run_at"].to_list(),
                y=line[column].to_list(),
                customdata=line["configuration"].to_list(),
                mode="lines+markers",
                name=label,
                line={"color": color[tenant], "width": 3 if tenant == FLEET else 1.5},
                visible=True if i <= TENANTS_SHOWN else "legendonly",
                hovertemplate=f"%{{x}}: %{{y:{ticks}}} (%{{customdata}})<extra>{label}</extra>",
            )
        )
    now = rows.filter((pl.col("run_id") == latest_run) & pl.col(column).is_not_null())
    fig.add_trace(
        go.Scatter(
            x=now["run_at"].to_list(),
            y=now[column].to_list(),
            text=[plotly_text("fleet" if t == FLEET else t) for t in now["tenant"].to_list()],
            mode="markers",
            name="this run",
            marker={
                "symbol": "star",
                "size": 16,
                "color": [color[t] for t in now["tenant"].to_list()],
                "line": {"color": "#222", "width": 1},
            },
            hovertemplate=f"this run, %{{text}}: %{{y:{ticks}}}<extra></extra>",
        )
    )
    fig.update_layout(base_layout(title, "run (start, UTC)", height=380))
    fig.update_yaxes(title=plotly_text(y_title), tickformat=ticks)
    first, last = rows["run_at"].min(), rows["run_at"].max()
    if first == last:  # one run: an hour either side, not milliseconds
        fig.update_xaxes(range=[first - ONE_RUN_SPAN, last + ONE_RUN_SPAN])
    return figure_markup(fig, defer=True)  # the section starts collapsed


def _configuration_expr() -> pl.Expr:
    capacity = (
        pl.when(pl.col("capacity_blocks").is_null())
        .then(pl.lit("unbounded"))
        .otherwise(pl.format("{} blocks", pl.col("capacity_blocks")))
    )
    return pl.format(
        "{}, {}, {}, window {}", "policy", "isolation", capacity, "measure_window"
    ).alias("configuration")


def _configuration(row: dict[str, Any]) -> str:
    cap = "unbounded" if row["capacity_blocks"] is None else f"{row['capacity_blocks']:,} blocks"
    return f"{row['policy']}, {row['isolation']}, {cap}, window {row['measure_window']}"

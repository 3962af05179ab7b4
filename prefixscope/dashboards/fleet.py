"""The fleet section of the report: replicas behind a router, each with its own prefix cache.

Reads the ``latest_fleet_hit_rates`` and ``latest_fleet_replicas`` views (written by the
``fleet`` stage); ``templates/fleet.html`` lays them out. Per replica count (capacity per
replica, load scale, ...), one labelled point per router: the fleet's token hit rate against
its load imbalance and against its TTFT, then each replica's busy time so skew shows. The
fleet's rows only: the routers are compared on the whole traffic.
"""

from __future__ import annotations

from typing import Any

import duckdb
import plotly.graph_objects as go
import polars as pl
from markupsafe import Markup

from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.budget import budget_chart, read_budget
from prefixscope.dashboards.engines import engine_figure
from prefixscope.dashboards.figures import (
    PALETTE,
    POLICY_COLOURS,
    base_layout,
    figure_markup,
    plotly_text,
    selectable,
)
from prefixscope.dashboards.slo import slo_section
from prefixscope.dashboards.tiers import tier_chart, tier_verdict
from prefixscope.dashboards.views import read_view

#: The tiers behind each replica's HBM cache (per-replica DRAM, a shared store), where the
#: warehouse's fleet tables have them: part of a configuration.
TIERS = ("dram_blocks", "dram_gbps", "store_blocks", "store_unbounded", "store_gbps")
#: What one group of charts holds fixed: every router of it is one point.
GROUP = (
    "replicas", "capacity_blocks", "policy", "load_scale", *TIERS, "model", "gpu",
    # set by the ones before it, where the warehouse has them: words of the title
    "deployment", "kv_pool_blocks", "exceeds_hbm",
    # the engine whose scheduler the replicas follow, where the warehouse has it
    "engine",
)  # fmt: skip
#: One fleet configuration of ``latest_fleet_hit_rates`` (one of its rows per window).
CONFIGURATION = ("router", *GROUP)
#: What ``latest_fleet_replicas`` knows of a group (it is not per window, nor per pricing).
REPLICA_GROUP = (
    "replicas", "capacity_blocks", "policy", "load_scale", *TIERS, "deployment", "engine",
)  # fmt: skip

STEADY = "steady"


def fleet_section(
    con: duckdb.DuckDBPyConnection, budget: pl.DataFrame | None = None
) -> dict[str, Any] | None:
    """What ``templates/fleet.html`` shows of the latest fleet runs; None before any. One chart
    per question, the groups of configurations behind a selector (``figures.selectable``)."""
    rates = read_view(con, "latest_fleet_hit_rates")
    if rates.is_empty():
        return None
    rows = chosen_rows(rates.filter(pl.col("tenant") == FLEET))
    if rows.is_empty():
        return None
    replicas = read_view(con, "latest_fleet_replicas")
    colors = {r: i for i, r in enumerate(sorted(rows["router"].unique().to_list()))}
    keys = _present(rows, GROUP)
    varies = {k: rows[k].n_unique() > 1 for k in keys}
    per_replica_keys = _present(replicas, REPLICA_GROUP)
    imbalance, ttft, busy = go.Figure(), go.Figure(), go.Figure()
    titles, groups = [], []
    for g, (key, group) in enumerate(rows.group_by(keys, maintain_order=True)):
        spec = dict(zip(keys, key, strict=True))
        titles.append(group_title(spec, varies))
        groups.append(group)
        meta = {"fleet": g}
        _router_points(
            imbalance,
            group,
            colors,
            meta,
            y="load_imbalance",
            hover="load imbalance %{y:.3f} (prefill %{customdata[0]:.3f})",
            custom=lambda r: [r["prefill_imbalance"]],
        )
        _router_points(
            ttft,
            group,
            colors,
            meta,
            y="ttft_p95_s",
            hover="TTFT p50 %{customdata[0]:.3f} s, p95 %{y:.3f} s, p99 %{customdata[1]:.3f} s",
            custom=lambda r: [r["ttft_p50_s"], r["ttft_p99_s"]],
            error=True,
        )
        mine = replicas.filter(
            *(pl.col(k).eq_missing(spec.get(k)) for k in per_replica_keys if k in spec)
        )
        _replica_bars(busy, mine, colors, meta)
    charts = [
        _finish_imbalance(imbalance, rows, titles),
        _finish_ttft(ttft, rows, titles),
    ]
    busy_chart = None
    if busy.data:
        busy.update_layout(
            base_layout("", "router, replica", height=300, showlegend=False),
            title_font_size=13,
        )
        busy.update_yaxes(title="busy time vs mean", tickformat="+.1%", rangemode="normal")
        title = "Busy time per replica, vs its fleet's mean"
        by_group = {str(g): title for g in range(len(titles))}
        busy_chart = figure_markup(selectable(busy, ["fleet"], by_group))
    return {
        "window": window_note(rows),
        "pricing": pricing_note(rows),
        "groups": titles,
        "charts": charts,
        "replica_chart": busy_chart,
        "budget": budget_chart(read_budget(con) if budget is None else budget, groups, titles),
        "slo": slo_section(con),
        "engines": engine_figure(rates),
        "tiers": _tiers(rows),
        "rows": table_rows(rows),
        "columns": table_columns(rows),
    }


def _tiers(rows: pl.DataFrame) -> dict[str, Any] | None:
    """Whether each simulated tier pays for itself: a chart and a sentence; None without one."""
    chart = tier_chart(rows)
    return None if chart is None else {"chart": chart, "verdict": tier_verdict(rows)}


def chosen_rows(fleet: pl.DataFrame) -> pl.DataFrame:
    """One row per configuration: its 'steady' window when measured (the caches filled),
    else 'all', else the first other window. Sorted by replicas, capacity, load, router."""
    rank = (
        pl.when((pl.col("measure_window") == STEADY) & pl.col("token_hit_rate").is_not_null())
        .then(0)
        .when(pl.col("measure_window") == "all")
        .then(1)
        .when(pl.col("measure_window") == STEADY)
        .then(3)
        .otherwise(2)
    )
    never_filled = (
        ((pl.col("measure_window") == STEADY) & (pl.col("steady") == False))  # noqa: E712
        .any()
        .over(_present(fleet, CONFIGURATION))
    )
    return (
        fleet.with_columns(_rank=rank, never_filled=never_filled)
        .sort("_rank", maintain_order=True)
        .unique(_present(fleet, CONFIGURATION), keep="first", maintain_order=True)
        .drop("_rank")
        .sort(
            [*_present(fleet, GROUP), pl.col("router").str.replace(r"@.*", ""),
             *_present(fleet, ("router_delay_ms",))],
            nulls_last=False,
        )  # fmt: skip
    )


def _present(df: pl.DataFrame, columns: tuple[str, ...]) -> list[str]:
    """Those of ``columns`` that ``df`` has (the tier columns came later than the others)."""
    return [c for c in columns if c in df.columns]


def tier_words(r: dict[str, Any]) -> str:
    """The tiers behind a replica's HBM cache, as words ("" when none)."""
    out = ""
    if r.get("dram_blocks"):
        out += f" + {r['dram_blocks']:,} DRAM blocks" + _gbps(r.get("dram_gbps"))
    if r.get("store_unbounded"):
        out += " + an unbounded shared store" + _gbps(r.get("store_gbps"))
    elif r.get("store_blocks") is not None:
        out += f" + a shared store of {r['store_blocks']:,} blocks" + _gbps(r.get("store_gbps"))
    return out


def hbm_words(r: dict[str, Any]) -> str:
    """The replica's deployment and whether its capacity fits its HBM, as words ("" when the
    row has neither: a run before deployments, or a GPU without an HBM figure)."""
    out = ""
    if r.get("deployment"):
        out += f" on {r['deployment']} (a {r['kv_pool_blocks']:,}-block KV pool)"
    if r.get("exceeds_hbm"):
        held = r["deployment"] if r.get("deployment") else f"one {r['gpu']}"
        out += f" — more than {held}'s HBM holds: a what-if"
    return out


def _gbps(x: float | None) -> str:
    return "" if x is None else f" at {x:g} GB/s"


def group_title(spec: dict[str, Any], varies: dict[str, bool]) -> str:
    """The group as words (4 replicas × 4,000 blocks each), with what else tells it apart."""
    title = f"{spec['replicas']} replicas × {spec['capacity_blocks']:,} blocks each"
    title += tier_words(spec) + hbm_words(spec)
    if varies["load_scale"] or spec["load_scale"] != 1:
        title += f", load ×{spec['load_scale']:g}"
    if spec.get("engine") and (varies.get("engine") or spec["engine"] != "ideal"):
        title += f", {spec['engine']} engine"
    if varies["policy"]:
        title += f", {spec['policy']}"
    if varies["model"] or varies["gpu"]:
        title += f", {spec['model']} on {spec['gpu']}"
    return title


def window_note(rows: pl.DataFrame) -> str:
    """Which window the section shows, and where its caches started."""
    warm = rows["warm_start"].drop_nulls().unique() if "warm_start" in rows.columns else None
    started = "" if warm is None or warm.to_list() in ([], ["cold"]) else (
        f" The caches started warm ({', '.join(warm.to_list())}): the requests replayed first "
        "are not measured."
    )  # fmt: skip
    return _window_note(rows) + started


def _window_note(rows: pl.DataFrame) -> str:
    windows = rows["measure_window"].unique().to_list()
    if windows == [STEADY]:
        start = rows["warmup_requests"].drop_nulls()
        since = f", from request {start[0]:,}" if start.len() else ""
        return f"Window: steady (after the caches filled{since})."
    if windows == ["all"]:
        return "Window: all (every request; no steady window was measured)."
    return (
        "Window: steady where it was measured and the caches filled, else all requests; "
        "the table's window column says which."
    )


def pricing_note(rows: pl.DataFrame) -> str:
    """What priced the replicas' steps, hence TTFT and busy time."""
    kinds = rows.select("model", "gpu", "cost_model").unique(maintain_order=True)
    return "; ".join(f"{m} on {g} ({c} cost model)" for m, g, c in kinds.iter_rows())


# --- figures ---------------------------------------------------------------------------------


def _finish_imbalance(fig: go.Figure, rows: pl.DataFrame, titles: list[str]) -> Markup:
    """Token hit rate (x) against load imbalance (y): one labelled point per router. The
    group is named by the selector above the charts, not in their titles (half a page wide)."""
    fig.add_hline(y=1, line_dash="dot", line_color="#999")
    _finish(fig, rows)
    fig.update_yaxes(
        title="load imbalance (max / mean busy time)", tickformat=".3f", rangemode="normal"
    )
    by_group = {str(g): "Token hit rate vs load imbalance" for g in range(len(titles))}
    return figure_markup(selectable(fig, ["fleet"], by_group))


def _finish_ttft(fig: go.Figure, rows: pl.DataFrame, titles: list[str]) -> Markup:
    """Token hit rate (x) against TTFT p95 (y), bars from p50 to p99: a point per router."""
    _finish(fig, rows)
    fig.update_yaxes(title="TTFT p95 (s); bars p50 to p99", tickformat=",.2f")
    by_group = {str(g): "Token hit rate vs TTFT (queueing included)" for g in range(len(titles))}
    return figure_markup(selectable(fig, ["fleet"], by_group))


def _router_points(
    fig: go.Figure,
    group: pl.DataFrame,
    colors: dict[str, int],
    meta: dict[str, int],
    *,
    y: str,
    hover: str,
    custom: Any,
    error: bool = False,
) -> None:
    """One labelled point per router of ``group`` on ``fig``, and the group's ceiling (one
    unbounded cache) as a dashed vertical line when its routers share it."""
    shown = group.filter(pl.col("token_hit_rate").is_not_null() & pl.col(y).is_not_null())
    # Labels alternate above and below the points, in hit-rate order: neighbours overlap less.
    for i, r in enumerate(shown.sort("token_hit_rate").iter_rows(named=True)):
        label = plotly_text(r["router"])
        extra: dict[str, Any] = {}
        if error:
            p50, p95, p99 = r["ttft_p50_s"], r["ttft_p95_s"], r["ttft_p99_s"]
            extra["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": [max(0.0, (p99 if p99 is not None else p95) - p95)],
                "arrayminus": [max(0.0, p95 - (p50 if p50 is not None else p95))],
                "thickness": 1.2,
            }
        color = PALETTE[colors[r["router"]] % len(PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=[r["token_hit_rate"]],
                y=[r[y]],
                customdata=[custom(r)],
                text=[label],
                mode="markers+text",
                textposition="top center" if i % 2 == 0 else "bottom center",
                name=label,
                meta=meta,
                marker={"color": color, "size": 11},
                textfont={"color": color},
                hovertemplate=f"token hit rate %{{x:.2%}}, {hover}<extra>{label}</extra>",
                **extra,
            )
        )
    ceilings = group["ceiling_token_hit_rate"].drop_nulls().unique()
    if ceilings.len() == 1 and not shown.is_empty():
        low, high = shown[y].min(), shown[y].max()
        pad = max(abs(high) * 0.05, 1e-3)
        fig.add_trace(
            go.Scatter(
                x=[ceilings[0], ceilings[0]],
                y=[low - pad, high + pad],
                mode="lines+text",
                text=["", f"one unbounded cache {ceilings[0]:.1%}"],
                textposition="bottom left",
                meta=meta,
                line={"dash": "dash", "color": POLICY_COLOURS["ceiling"], "width": 1},
                hoverinfo="skip",
                name="ceiling",
            )
        )


def _finish(fig: go.Figure, rows: pl.DataFrame) -> None:
    """The page's base layout with hit rate on x."""
    fig.update_layout(base_layout("", "fleet token hit rate", height=400, showlegend=False))
    fig.update_layout(title_font_size=13)
    xs = rows["token_hit_rate"].drop_nulls().to_list()
    xs += rows["ceiling_token_hit_rate"].drop_nulls().to_list()
    low, high = (min(xs), max(xs)) if xs else (0.0, 1.0)
    pad = max(0.02, (high - low) * 0.1)  # no point nor its label sits on the edge, cut
    fig.update_xaxes(tickformat=".0%", range=[max(0.0, low - pad), min(1.0, high + pad)])


def _replica_bars(
    fig: go.Figure, replicas: pl.DataFrame, colors: dict[str, int], meta: dict[str, int]
) -> None:
    """Each replica's busy time against its fleet's mean, grouped by router: the tallest bar
    of a router is its load imbalance less one."""
    if replicas.is_empty():
        return
    replicas = replicas.sort(["router", "replica"]).with_columns(
        over_mean=pl.col("busy_s") / pl.col("busy_s").mean().over("router") - 1
    )
    routers = replicas["router"].to_list()
    labels = [plotly_text(r) for r in routers]
    fig.add_trace(
        go.Bar(
            x=[labels, [str(i) for i in replicas["replica"].to_list()]],
            y=replicas["over_mean"].to_list(),
            text=labels,
            textposition="none",
            meta=meta,
            customdata=replicas.select(
                "replica", "busy_s", "prefill_tokens", "requests", "token_hit_rate"
            ).rows(),
            marker={"color": [PALETTE[colors.get(r, 0) % len(PALETTE)] for r in routers]},
            hovertemplate="%{text}, replica %{customdata[0]}: busy %{customdata[1]:,.1f} s "
            "(%{y:+.2%} vs mean), %{customdata[2]:,} prefill tokens, "
            "%{customdata[3]:,} requests, token hit rate %{customdata[4]:.2%}<extra></extra>",
        )
    )


# --- table -----------------------------------------------------------------------------------


#: The table's columns: (key, header, is_text); the engine's only where some row runs a KV pool
#: (an ``ideal``-only fleet reads as before engines existed).
COLUMNS = (
    ("router", "router", True),
    ("engine", "engine", True),
    ("replicas", "replicas", False),
    ("capacity", "capacity per replica", False),
    ("load_scale", "load scale", False),
    ("window", "window", True),
    ("token_hit_rate", "token hit rate", False),
    ("ceiling", "ceiling", False),
    ("ttft_p50", "TTFT p50", False),
    ("ttft_p95", "TTFT p95", False),
    ("ttft_p99", "TTFT p99", False),
    ("load_imbalance", "load imbalance", False),
    ("prefill_imbalance", "prefill imbalance", False),
)


def table_columns(rows: pl.DataFrame) -> list[tuple[str, str, bool]]:
    pooled = "engine" in rows.columns and bool((rows["engine"].fill_null("ideal") != "ideal").any())
    return [c for c in COLUMNS if c[0] != "engine" or pooled]


def table_rows(rows: pl.DataFrame) -> list[dict[str, str]]:
    out = []
    for r in rows.iter_rows(named=True):
        window = r["measure_window"]
        if r["never_filled"] and window != STEADY:
            window += " (caches never filled: no steady state)"
        capacity = f"{r['capacity_blocks']:,} blocks"
        if r["capacity_gib"] is not None:
            capacity += f" ({r['capacity_gib']:g} GiB)"
        capacity += tier_words(r) + hbm_words(r)
        out.append(
            {
                "router": r["router"],
                "engine": r.get("engine") or "",
                "replicas": str(r["replicas"]),
                "capacity": capacity,
                "load_scale": f"{r['load_scale']:g}×",
                "window": window,
                "token_hit_rate": _pct(r["token_hit_rate"]),
                "ceiling": _pct(r["ceiling_token_hit_rate"]),
                "ttft_p50": _s(r["ttft_p50_s"]),
                "ttft_p95": _s(r["ttft_p95_s"]),
                "ttft_p99": _s(r["ttft_p99_s"]),
                "load_imbalance": _ratio(r["load_imbalance"]),
                "prefill_imbalance": _ratio(r["prefill_imbalance"]),
            }
        )
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2%}"


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:,.3f} s"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"

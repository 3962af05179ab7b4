"""The SLO plan on the page: cost against TTFT p95, one point per fleet the planner searched
(``plan --slo``), the cheapest that meets the SLO marked, fleets without prefix caching apart.

Reads ``latest_plan_slo_fleets`` and ``latest_plan_slo_answers`` where the warehouse has them
(None otherwise: a warehouse from before the SLO planner, or one never planned for an SLO)."""

from __future__ import annotations

from typing import Any

import duckdb
import plotly.graph_objects as go
import polars as pl
from markupsafe import Markup

from prefixscope.dashboards.figures import base_layout, figure_markup, plotly_text, selectable
from prefixscope.dashboards.plan_slo import disagg_lines
from prefixscope.dashboards.views import has_view, read_view

FLEETS = "latest_plan_slo_fleets"
ANSWERS = "latest_plan_slo_answers"
WINDOWS = "latest_plan_slo_windows"
DISAGG = "latest_plan_slo_disagg"
#: How each line of the window-by-window chart is drawn: (prefix caching, scaled) -> name, dash.
GPU_LINES = {
    (True, True): ("each window sized alone, prefix caching", "solid", "#1f77b4"),
    (True, False): ("static, prefix caching", "dash", "#1f77b4"),
    (False, True): ("each window sized alone, no cache", "solid", "#7f7f7f"),
    (False, False): ("static, no cache", "dash", "#7f7f7f"),
}
#: How each kind of fleet is drawn: (prefix caching, meets the SLO) -> name, symbol, colour.
KINDS = {
    (True, True): ("prefix caching, meets the SLO", "circle", "#1f77b4"),
    (True, False): ("prefix caching, misses the SLO", "circle-open", "#1f77b4"),
    (False, True): ("no cache, meets the SLO", "square", "#7f7f7f"),
    (False, False): ("no cache, misses the SLO", "square-open", "#7f7f7f"),
}
ANSWER_COLUMNS = (
    ("load_scale", "load scale", False),
    ("caching", "prefix caching", True),
    ("slo", "SLO", True),
    ("met", "met", True),
    ("fleet", "cheapest fleet", True),
    ("usd_per_hour", "$ per hour", False),
    ("ttft_p95", "TTFT p95", False),
    ("binding", "binding", True),
    ("window", "window that binds", True),
    ("searched", "fleets searched", False),
    ("saved", "the cache saves", True),
)


def slo_section(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    """The frontier chart (a load-scale selector when the plan covers several), and the
    answers' rows; None without an SLO plan."""
    if not has_view(con, FLEETS):
        return None
    fleets = read_view(con, FLEETS)
    if fleets.is_empty():
        return None
    loads = sorted(fleets["load_scale"].unique().to_list())
    answers = read_view(con, ANSWERS).to_dicts() if has_view(con, ANSWERS) else []
    windows = read_view(con, WINDOWS) if has_view(con, WINDOWS) else pl.DataFrame()
    return {
        "loads": [f"load ×{x:g}" for x in loads],
        "chart": frontier_figure(fleets, loads),
        "gpus_chart": None if windows.is_empty() else gpus_figure(windows, answers, loads),
        "answers": [answer_cells(r) for r in answers],
        "columns": ANSWER_COLUMNS,
        "disagg": disagg_lines(read_view(con, DISAGG).to_dicts()) if has_view(con, DISAGG) else [],
    }


def gpus_figure(windows: pl.DataFrame, answers: list[dict[str, Any]], loads: list[float]) -> Markup:
    """GPUs over the trace (``plan --slo --per-window``): each window's answer searched alone
    (a step per window; a gap where none meets) beside the static answer held in every window,
    with prefix caching and without, per load scale (the same selector as the frontier)."""
    fig = go.Figure()
    titles = {}
    for i, load in enumerate(loads):
        meta = {"sloload": i}
        hours = []
        for caching in (True, False):
            rows = windows.filter(
                (pl.col("load_scale") == load) & (pl.col("prefix_caching") == caching)
            ).sort("window_start_s")
            if rows.is_empty():
                continue
            xs, ys = [], []
            for r in rows.iter_rows(named=True):
                xs += [r["window_start_s"] / 3600, r["window_end_s"] / 3600, None]
                gpus = r["gpus"] if r["met"] else None
                ys += [gpus, gpus, None]
            name, dash, colour = GPU_LINES[(caching, True)]
            fig.add_trace(_gpu_line(xs, ys, name, dash, colour, meta))
            static = next((a for a in answers if a["load_scale"] == load
                           and a["prefix_caching"] == caching and a["met"]), None)  # fmt: skip
            if static is not None:
                span = [rows["window_start_s"][0] / 3600, rows["window_end_s"][-1] / 3600]
                name, dash, colour = GPU_LINES[(caching, False)]
                fig.add_trace(_gpu_line(span, [static["gpus"]] * 2, name, dash, colour, meta))
                scaled, fixed = static.get("gpu_hours_per_window"), static.get("gpu_hours_static")
                if scaled is not None and fixed:
                    cache = "cache" if caching else "no cache"
                    hours.append(f"{cache} {scaled:,.1f} against {fixed:,.1f} GPU-hours")
        titles[str(i)] = f"GPUs window by window — load ×{load:g}" + (
            f" ({'; '.join(hours)})" if hours else ""
        )
    fig.update_layout(base_layout("", "hours after the first request", height=380))
    fig.update_yaxes(title="GPUs", tickformat=",d", rangemode="tozero")
    return figure_markup(selectable(fig, ["sloload"], titles))


def _gpu_line(
    xs: list, ys: list, name: str, dash: str, colour: str, meta: dict[str, int]
) -> go.Scatter:
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        name=name,
        meta=meta,
        line={"dash": dash, "color": colour, "width": 2},
        connectgaps=False,
        hovertemplate=f"%{{y:,d}} GPUs at %{{x:.2f}} h<extra>{name}</extra>",
    )


def frontier_figure(fleets: pl.DataFrame, loads: list[float]) -> Markup:
    """$ per hour (y) against TTFT p95 (x): a point per fleet searched, by prefix caching and
    whether it meets the SLO; a star on the cheapest that meets it, per caching mode."""
    fig = go.Figure()
    for i, load in enumerate(loads):
        at = fleets.filter(pl.col("load_scale") == load)
        meta = {"sloload": i}
        for (caching, meets), (name, symbol, colour) in KINDS.items():
            part = at.filter((pl.col("prefix_caching") == caching) & (pl.col("meets_slo") == meets))
            if part.is_empty():
                continue
            fig.add_trace(
                go.Scatter(
                    x=part["ttft_p95_s"].to_list(),
                    y=part["usd_per_hour"].to_list(),
                    text=[plotly_text(_words(r)) for r in part.iter_rows(named=True)],
                    mode="markers",
                    name=name,
                    meta=meta,
                    marker={"symbol": symbol, "color": colour, "size": 9},
                    hovertemplate="%{text}: TTFT p95 %{x:.3f} s, $%{y:,.2f}/h"
                    f"<extra>{name}</extra>",
                )
            )
        for caching in (True, False):
            met = at.filter((pl.col("prefix_caching") == caching) & pl.col("meets_slo"))
            if met.is_empty():
                continue
            best = met.sort(["usd_per_hour", "ttft_p95_s"]).row(0, named=True)
            label = "cheapest that meets the SLO" + ("" if caching else " without a cache")
            fig.add_trace(
                go.Scatter(
                    x=[best["ttft_p95_s"]],
                    y=[best["usd_per_hour"]],
                    text=[plotly_text(f"{label}: {_words(best)}, ${best['usd_per_hour']:,.2f}/h")],
                    mode="markers+text",
                    textposition="top right",
                    name=label,
                    meta=meta,
                    marker={
                        "symbol": "star",
                        "size": 18,
                        "color": KINDS[(caching, True)][2],
                        "line": {"color": "#222", "width": 1},
                    },
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    fig.update_layout(base_layout("", "TTFT p95 (s)", height=420))
    fig.update_yaxes(title="$ per hour", tickformat="$,.0f", rangemode="tozero")
    titles = {
        str(i): f"Cost against TTFT p95, every fleet searched — load ×{x:g}"
        for i, x in enumerate(loads)
    }
    return figure_markup(selectable(fig, ["sloload"], titles))


def _words(r: dict[str, Any]) -> str:
    """A fleet searched, in words (4 × h100x1, cache-aware, vllm)."""
    out = f"{r['replicas']} × {r['deployment'] or r['gpu']}, {r['router']}"
    if r.get("engine"):
        out += f", {r['engine']}"
    return out


def window_cell(r: dict[str, Any]) -> str:
    """``129–130 h of 169 windows of 1 h (searched on 1)``; ``whole trace`` for a search of
    the trace as one window."""
    windows = r.get("windows")
    start, end = r.get("bound_window_start_s"), r.get("bound_window_end_s")
    if not r.get("window_s") or not windows or windows < 2 or start is None or end is None:
        return "whole trace"
    return (
        f"{start / 3600:,.4g}–{end / 3600:,.4g} h of {windows:,} windows of "
        f"{r['window_s'] / 3600:,.4g} h (searched on {r.get('windows_searched') or 0:,})"
    )


def answer_cells(r: dict[str, Any]) -> dict[str, str]:
    """One row of ``latest_plan_slo_answers`` as text."""
    saved = ""
    if r.get("gpus_saved") is not None:
        saved = f"{r['gpus_saved']:,} GPUs"
        if r.get("usd_saved_per_month") is not None:
            saved += f", ${r['usd_saved_per_month']:,.0f} a month"
    fleet = "—"
    if r["met"] and r["replicas"] is not None:
        fleet = f"{r['replicas']} × {r['deployment']} ({r['gpus']} GPUs), {r['router']}"
    return {
        "load_scale": f"{r['load_scale']:g}×",
        "caching": "on" if r["prefix_caching"] else "off",
        "slo": str(r["slo"]),
        "met": "yes" if r["met"] else "no",
        "fleet": fleet,
        "usd_per_hour": "—" if r["usd_per_hour"] is None else f"${r['usd_per_hour']:,.2f}",
        "ttft_p95": "—" if r["ttft_p95_s"] is None else f"{r['ttft_p95_s']:.3f} s",
        "binding": str(r["binding"] or ""),
        "window": window_cell(r),
        "searched": f"{r['fleets_searched']:,}",
        "saved": saved,
    }

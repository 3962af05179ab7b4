"""The fleet report page: trace summary, hit-rate curves per policy, fleet and tenant tables.

The page embeds plotly.js itself, so it opens from disk with no server and no network.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from string import Template

import duckdb
import plotly.graph_objects as go
import plotly.offline
import polars as pl

from prefixscope import __version__, sql
from prefixscope.dashboards.savings import savings_html
from prefixscope.dashboards.structure import structure_html
from prefixscope.warehouse import FLEET

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")


def build_report(con: duckdb.DuckDBPyConnection, out: str | Path, warehouse_name: str) -> Path:
    """Write the report page for the warehouse behind ``con`` to ``out`` and return its path."""
    summary = con.sql(sql.load("marts/trace_summary")).pl()
    rates = con.sql(sql.load("marts/latest_hit_rates")).pl()
    series = con.sql(sql.load("marts/latest_timeseries")).pl()
    curves = con.sql(sql.load("marts/latest_mrc")).pl()
    page = Template(
        (files("prefixscope.dashboards") / "templates" / "report.html").read_text("utf-8")
    ).substitute(
        plotlyjs=plotly.offline.get_plotlyjs(),
        generated=f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        version=html.escape(__version__),
        warehouse=html.escape(warehouse_name),
        summary=_summary_html(summary),
        charts=_charts_html(rates),
        timeseries=_timeseries_html(series),
        mrc=_mrc_html(curves),
        table=_table_html(rates),
        structure=structure_html(con),
        miss_cost=savings_html(con),
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _summary_html(summary: pl.DataFrame) -> str:
    row = summary.row(0, named=True)
    span = "—"
    if row["first_arrival"] is not None:
        minutes = (row["last_arrival"] - row["first_arrival"]).total_seconds() / 60
        span = f"{row['first_arrival']:%Y-%m-%d %H:%M:%S} UTC, {minutes:,.1f} min"
        if row["first_arrival"].year == 1970:  # offsets from the start, as hash-id traces give
            span += " (relative times: the log carries no date; `ingest --start` sets one)"
    items = [
        ("Requests", f"{row['requests']:,}"),
        ("Rejected input lines", f"{row['rejected_lines']:,}"),
        ("Files", f"{row['files']:,}"),
        ("Tenants", f"{row['tenants']:,}"),
        ("Input tokens", f"{row['input_tokens']:,}"),
        ("Output tokens", f"{row['output_tokens']:,}"),
        ("Block lookups", f"{row['block_lookups']:,}"),
        ("Distinct blocks", f"{row['unique_blocks']:,}"),
        ("Block size (tokens)", html.escape(str(row["block_sizes"] or "—"))),
        ("First arrival, span", span),
    ]
    cells = "".join(f"<tr><th class='text'>{k}</th><td>{v}</td></tr>" for k, v in items)
    return f"<table>{cells}</table>"


def _charts_html(rates: pl.DataFrame) -> str:
    if rates.is_empty():
        return "<p>No simulation results yet: run <code>prefixscope simulate</code>.</p>"
    parts = []
    for window in rates["measure_window"].unique(maintain_order=True):
        in_window = rates.filter(pl.col("measure_window") == window)
        tenants = in_window["tenant"].unique(maintain_order=True).to_list()
        groups = [FLEET] + ([t for t in tenants if t != FLEET] if len(tenants) > 2 else [])
        for tenant in groups:
            fig = _curve_figure(in_window.filter(pl.col("tenant") == tenant), window, tenant)
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False))
    return "\n".join(parts)


def _mrc_html(curves: pl.DataFrame) -> str:
    """The ``mrc`` curves: token hit rate against capacity (log axis; in GiB of KV cache when
    the curve was computed for a model), one chart per window, a line per tenant and curve."""
    if curves.is_empty():
        return "<p>No curve yet: run <code>prefixscope curve</code>.</p>"
    parts = []
    for (window,), rows in curves.group_by(["measure_window"], maintain_order=True):
        in_gib = rows["capacity_gib"].null_count() == 0
        fig = go.Figure()
        keys = rows.select("policy", "isolation", "sample_rate", "sample_by", "tenant").unique(
            maintain_order=True
        )
        for i, (policy, mode, rate, by, tenant) in enumerate(keys.iter_rows()):
            line = rows.filter(
                (pl.col("policy") == policy)
                & (pl.col("isolation") == mode)
                & (pl.col("sample_rate") == rate)
                & pl.col("sample_by").eq_missing(by)
                & (pl.col("tenant") == tenant)
            ).sort("capacity_blocks")
            who = "fleet" if tenant == FLEET else f"tenant {tenant}"
            name = f"{policy}{'' if mode == 'shared' else ', ' + mode}" + (
                "" if rate == 1 else f", sampled{' by ' + by if by else ''} {rate:g}"
            )
            fig.add_trace(
                go.Scatter(
                    x=line["capacity_gib" if in_gib else "capacity_tokens"].to_list(),
                    y=line["token_hit_rate"].to_list(),
                    customdata=line["capacity_blocks"].to_list(),
                    mode="lines",
                    name=f"{name} — {who}",
                    line={
                        "color": _PALETTE[i % len(_PALETTE)],
                        "width": 3 if tenant == FLEET else 1.5,
                    },
                    hovertemplate="%{x:,.4g} ("
                    + "%{customdata:,} blocks): %{y:.2%}<extra>"
                    + html.escape(f"{name} — {who}")
                    + "</extra>",
                )
            )
        unit = "GiB of KV cache" if in_gib else "tokens"
        fig.update_layout(
            title=f"Token hit rate at every capacity (curve) — window: {window}",
            xaxis={"title": f"cache capacity ({unit})", "type": "log"},
            yaxis={"title": "token hit rate", "tickformat": ".0%", "rangemode": "tozero"},
            height=440,
            margin={"l": 60, "r": 20, "t": 60, "b": 50},
        )
        parts.append(fig.to_html(full_html=False, include_plotlyjs=False))
    return "\n".join(parts)


def _timeseries_html(series: pl.DataFrame) -> str:
    """The fleet's token hit rate over time: warm-up and drift. One line per configuration; the
    middle capacity of each policy is shown, the others are a click on the legend away."""
    if series.is_empty():
        return "<p>No time series yet.</p>"
    fig = go.Figure()
    keys = series.select("policy", "isolation", "capacity_blocks").unique(maintain_order=True)
    middle: dict[tuple[str, str], int | None] = {}
    for (policy, mode), group in keys.group_by(["policy", "isolation"], maintain_order=True):
        caps = sorted(c for c in group["capacity_blocks"].to_list() if c is not None)
        middle[(str(policy), str(mode))] = caps[len(caps) // 2] if caps else None
    colors = {name: i for i, name in enumerate(keys["policy"].unique(maintain_order=True))}
    for policy, mode, cap in keys.iter_rows():
        line = series.filter(
            (pl.col("policy") == policy)
            & (pl.col("isolation") == mode)
            & (
                pl.col("capacity_blocks").is_null()
                if cap is None
                else pl.col("capacity_blocks") == cap
            )
        )
        name = f"{policy}{'' if mode == 'shared' else ', ' + mode}" + (
            "" if cap is None else f" @ {cap:,} blocks"
        )
        fig.add_trace(
            go.Scatter(
                x=line["bucket_start"].to_list(),
                y=line["token_hit_rate"].to_list(),
                mode="lines",
                name=name,
                line={
                    "color": _PALETTE[colors[policy] % len(_PALETTE)],
                    "dash": "solid" if cap == middle[(policy, mode)] else "dot",
                },
                visible=True if cap == middle[(policy, mode)] else "legendonly",
            )
        )
    fig.update_layout(
        title="Fleet token hit rate over time (warm-up, drift)",
        xaxis={"title": "arrival time (UTC)"},
        yaxis={"title": "token hit rate", "tickformat": ".0%", "rangemode": "tozero"},
        height=420,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
    )
    return fig.to_html(full_html=False, include_plotlyjs=False)


def _curve_figure(rows: pl.DataFrame, window: str, tenant: str) -> go.Figure:
    fig = go.Figure()
    rows = rows.with_columns(label=_label_expr())
    bounded = rows.filter(pl.col("capacity_blocks").is_not_null()).sort("capacity_blocks")
    for i, policy in enumerate(bounded["label"].unique(maintain_order=True)):
        curve = bounded.filter(pl.col("label") == policy)
        fig.add_trace(
            go.Scatter(
                x=curve["capacity_tokens"].to_list(),
                y=curve["token_hit_rate"].to_list(),
                customdata=curve["capacity_blocks"].to_list(),
                mode="lines+markers",
                name=policy,
                line={"color": _PALETTE[i % len(_PALETTE)]},
                hovertemplate="%{x:,} tokens (%{customdata:,} blocks): %{y:.2%}<extra>"
                + policy
                + "</extra>",
            )
        )
    for row in rows.filter(pl.col("capacity_blocks").is_null()).iter_rows(named=True):
        if row["token_hit_rate"] is None:
            continue
        fig.add_hline(
            y=row["token_hit_rate"],
            line_dash="dash",
            line_color="#555",
            annotation_text=f"{row['label']} {row['token_hit_rate']:.2%}",
            annotation_position="top left",
        )
    who = "fleet" if tenant == FLEET else f"tenant {tenant}"
    fig.update_layout(
        title=f"Token hit rate over capacity — {who}, window: {window}",
        xaxis={"title": "cache capacity (tokens)", "type": "log"},
        yaxis={"title": "token hit rate", "tickformat": ".0%", "rangemode": "tozero"},
        height=420,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"title": "policy"},
    )
    return fig


def _label_expr() -> pl.Expr:
    """A curve's name: the policy, its options and its isolation when not shared."""
    label = pl.col("policy")
    label = (
        pl.when(pl.col("policy_options").is_not_null())
        .then(pl.concat_str([label, pl.lit(" ("), pl.col("policy_options"), pl.lit(")")]))
        .otherwise(label)
    )
    return (
        pl.when(pl.col("isolation") != "shared")
        .then(pl.concat_str([label, pl.lit(", "), pl.col("isolation")]))
        .otherwise(label)
    )


def _table_html(rates: pl.DataFrame) -> str:
    if rates.is_empty():
        return "<p>No simulation results yet.</p>"
    head = (
        "<tr><th class='text'>window</th><th class='text'>tenant</th><th class='text'>policy</th>"
        "<th class='text'>isolation</th><th>capacity (blocks)</th><th>capacity (tokens)</th>"
        "<th>capacity (GiB)</th><th>requests</th><th>input tokens</th><th>hit tokens</th>"
        "<th>from other tenants</th><th>token hit rate</th><th>95% CI</th>"
        "<th>request hit rate</th></tr>"
    )
    if rates.filter(pl.col("tenant") != FLEET)["tenant"].n_unique() <= 1:
        rates = rates.filter(pl.col("tenant") == FLEET)  # one tenant: its rows repeat the fleet's
    body = []
    for r in rates.iter_rows(named=True):
        cls = " class='fleet'" if r["tenant"] == FLEET else ""
        cap_b = "∞" if r["capacity_blocks"] is None else f"{r['capacity_blocks']:,}"
        cap_t = "∞" if r["capacity_tokens"] is None else f"{r['capacity_tokens']:,}"
        tenant = "fleet" if r["tenant"] == FLEET else html.escape(r["tenant"])
        gib = "" if r["capacity_gib"] is None else f"{r['capacity_gib']:g} ({r['model']})"
        policy = r["policy"] + (f" ({r['policy_options']})" if r["policy_options"] else "")
        ci = "" if r["ci_low"] is None else f"{_pct(r['ci_low'])}–{_pct(r['ci_high'])}"
        if r["steady"] is False:
            ci = "cache never filled: no steady state"
        body.append(
            f"<tr{cls}><td class='text'>{html.escape(r['measure_window'])}</td>"
            f"<td class='text'>{tenant}</td><td class='text'>{html.escape(policy)}</td>"
            f"<td class='text'>{html.escape(r['isolation'])}</td>"
            f"<td>{cap_b}</td><td>{cap_t}</td><td>{html.escape(gib)}</td><td>{r['requests']:,}</td>"
            f"<td>{r['input_tokens']:,}</td><td>{r['hit_tokens']:,}</td>"
            f"<td>{r['cross_tenant_hit_tokens']:,}</td>"
            f"<td>{_pct(r['token_hit_rate'])}</td><td>{html.escape(ci)}</td>"
            f"<td>{_pct(r['request_hit_rate'])}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2%}"

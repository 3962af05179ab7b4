"""The fleet report page: trace summary, hit-rate curves per policy, fleet and tenant tables.

The page embeds plotly.js itself, so it opens from disk with no server and no network. It is
rendered from ``templates/report.html`` with autoescaping: Python prepares plain values
(formatted strings, row dicts); the only markup it hands over is plotly's (the figures and the
plotly.js bundle). Names that go into a figure are escaped for Plotly, which renders some HTML
in titles, legends and hover labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import plotly.graph_objects as go
import polars as pl
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from prefixscope import __version__
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.block_sizes import block_size_table
from prefixscope.dashboards.budget import budget_headline, read_budget
from prefixscope.dashboards.cards import headline_cards
from prefixscope.dashboards.figures import (
    POLICY_COLOURS,
    base_layout,
    figure_markup,
    plotly_bundle,
    plotly_text,
    policy_line,
    selectable,
)
from prefixscope.dashboards.fleet import fleet_section
from prefixscope.dashboards.history import history_section
from prefixscope.dashboards.plan import plan_section
from prefixscope.dashboards.plan_slo import from_warehouse as slo_sentences
from prefixscope.dashboards.savings import DECODE_NOTE, savings_section
from prefixscope.dashboards.structure import structure_section
from prefixscope.dashboards.tables import datatable, datatables_script
from prefixscope.dashboards.validation import validation_section
from prefixscope.dashboards.views import read_view, trace_summary
from prefixscope.ingest.hashkey import PLAIN

TEMPLATES = Environment(
    loader=PackageLoader("prefixscope.dashboards"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
TEMPLATES.globals["datatable"] = datatable
#: The selectors' script (inline, after the charts): ``templates/select.js``.
SELECT_JS = (Path(__file__).parent / "templates" / "select.js").read_text(encoding="utf-8")


def build_report(con: duckdb.DuckDBPyConnection, out: str | Path, warehouse_name: str) -> Path:
    """Write the report page for the warehouse behind ``con`` to ``out`` and return its path."""
    summary = trace_summary(con)
    rates = read_view(con, "latest_hit_rates")
    sizes = block_size_table(rates)
    own = summary["max_block_size"]
    if own is not None:  # the charts and tables at the log's own block size; what-ifs apart
        rates = rates.filter(pl.col("block_size") == own)
    curves = read_view(con, "latest_mrc")
    choices = Choices.of(rates, curves)
    budget = read_budget(con)  # the hit-rate section's headline and the fleet section's chart
    page = TEMPLATES.get_template("report.html").render(
        plotlyjs=Markup(plotly_bundle()),
        datatables=datatables_script(),
        selectjs=Markup(SELECT_JS),
        generated=f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        version=__version__,
        warehouse=warehouse_name,
        summary=summary_items(summary),
        cards=headline_cards(con),
        choices=choices.options(),
        capacity=capacity_figure(rates, choices),
        mrc=curve_figure(curves, choices),
        timeseries=timeseries_figure(read_view(con, "latest_timeseries")),
        history=history_section(con),
        rates=rate_rows(rates),
        block_sizes=sizes,
        structure=structure_section(con, int(summary["max_block_size"] or 1)),
        savings=savings_section(con),
        decode_note=DECODE_NOTE,
        fleet=fleet_section(con, budget),
        budget=budget_headline(budget),
        validation=validation_section(con),
        plan=plan_section(read_view(con, "latest_plan").to_dicts(), slo_sentences(con)),
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


# --- figures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choices:
    """What the page's selectors offer: the tenants (the fleet first) and the windows ("all"
    first); a chart's traces name them by index (``figures.selectable``)."""

    tenants: tuple[str, ...]
    windows: tuple[str, ...]

    @staticmethod
    def of(rates: pl.DataFrame, curves: pl.DataFrame) -> Choices:
        names = [*rates["tenant"].to_list(), *curves["tenant"].to_list()]
        tenants = [FLEET] + sorted({t for t in names if t != FLEET})
        found = [*rates["measure_window"].to_list(), *curves["measure_window"].to_list()]
        windows = list(dict.fromkeys(found))
        windows.sort(key=lambda w: w != "all")
        return Choices(tuple(tenants), tuple(windows or ["all"]))

    def options(self) -> dict[str, list[str]]:
        """The selectors' options, as the page shows them (text)."""
        return {
            "tenant": ["fleet" if t == FLEET else f"tenant {t}" for t in self.tenants],
            "window": list(self.windows),
        }

    def titles(self, title: str) -> dict[str, str]:
        """``title`` for every choice of tenant and window."""
        who = self.options()["tenant"]
        return {
            f"{i}|{j}": f"{title} — {who[i]}, window: {w}"
            for i in range(len(self.tenants))
            for j, w in enumerate(self.windows)
        }

    def index(self, tenant: str, window: str) -> dict[str, int]:
        return {"tenant": self.tenants.index(tenant), "window": self.windows.index(window)}


SELECTED = ("tenant", "window")


def capacity_figure(rates: pl.DataFrame, choices: Choices) -> Markup | None:
    """The token hit rate over capacity: one chart, a line per policy (and isolation) for every
    tenant and window, the selected ones shown; the ceilings as dashed lines."""
    if rates.is_empty():
        return None
    fig = go.Figure()
    rates = rates.with_columns(label=_label_expr())
    lowest, highest = rates["capacity_tokens"].min(), rates["capacity_tokens"].max()
    for (tenant, window), rows in rates.group_by(["tenant", "measure_window"], maintain_order=True):
        meta = choices.index(str(tenant), str(window))
        bounded = rows.filter(pl.col("capacity_blocks").is_not_null()).sort("capacity_blocks")
        for (policy, options, mode, name), curve in bounded.group_by(
            ["policy", "policy_options", "isolation", "label"], maintain_order=True
        ):
            label = plotly_text(str(name))
            fig.add_trace(
                go.Scatter(
                    x=curve["capacity_tokens"].to_list(),
                    y=curve["token_hit_rate"].to_list(),
                    customdata=curve["capacity_blocks"].to_list(),
                    mode="lines+markers",
                    name=label,
                    meta=meta,
                    line=policy_line(str(policy), str(mode), options),
                    hovertemplate="%{x:,} tokens (%{customdata:,} blocks): %{y:.2%}"
                    f"<extra>{label}</extra>",
                )
            )
        # One dashed line per distinct unbounded rate (the ceilings of several isolations
        # often coincide: one line, their labels joined).
        unbounded = rows.filter(
            pl.col("capacity_blocks").is_null() & pl.col("token_hit_rate").is_not_null()
        )
        ceilings = unbounded.group_by(pl.col("token_hit_rate").round(4), maintain_order=True)
        for rate, labels in ceilings.agg("label").sort("token_hit_rate").iter_rows():
            label = plotly_text(f"{' = '.join(labels)} (unbounded) {rate:.2%}")
            fig.add_trace(
                go.Scatter(
                    x=[lowest, highest],
                    y=[rate, rate],
                    mode="lines",
                    name=label,
                    meta=meta,
                    line={"color": POLICY_COLOURS["ceiling"], "dash": "dash", "width": 1.5},
                    hovertemplate=f"%{{y:.2%}}<extra>{label}</extra>",
                )
            )
    fig.update_layout(
        base_layout("", "cache capacity (tokens)", log_x=True, legend={"title": "policy"})
    )
    return figure_markup(selectable(fig, SELECTED, choices.titles("Token hit rate over capacity")))


def curve_figure(curves: pl.DataFrame, choices: Choices) -> Markup | None:
    """The ``mrc`` curves: token hit rate against capacity (log axis; in GiB of KV cache when
    the curve was computed for a model), a line per curve of the selected tenant and window."""
    if curves.is_empty():
        return None
    in_gib = curves["capacity_gib"].null_count() == 0
    fig = go.Figure()
    keys = curves.select(
        "measure_window", "tenant", "policy", "isolation", "sample_rate", "sample_by"
    ).unique(maintain_order=True)
    for window, tenant, policy, mode, rate, by in keys.iter_rows():
        line = curves.filter(
            (pl.col("measure_window") == window)
            & (pl.col("policy") == policy)
            & (pl.col("isolation") == mode)
            & (pl.col("sample_rate") == rate)
            & pl.col("sample_by").eq_missing(by)
            & (pl.col("tenant") == tenant)
        ).sort("capacity_blocks")
        name = f"{policy}{'' if mode == 'shared' else ', ' + mode}" + (
            "" if rate == 1 else f", sampled{' by ' + by if by else ''} {rate:g}"
        )
        drawn = line["sampled_blocks"][0] if "sampled_blocks" in line.columns else None
        if drawn is not None:
            name += f" ({drawn:,} sampled blocks)"
        who = "fleet" if tenant == FLEET else f"tenant {tenant}"
        label = plotly_text(f"{name} — {who}")
        style = policy_line(policy, mode)
        x = line["capacity_gib" if in_gib else "capacity_tokens"].to_list()
        meta = choices.index(tenant, window)
        band = _interval_band(line, x, style["color"], label)
        if band is not None:
            band.meta = meta
            fig.add_trace(band)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=line["token_hit_rate"].to_list(),
                customdata=line["capacity_blocks"].to_list(),
                mode="lines",
                name=label,
                meta=meta,
                line={**style, "width": 2.5},
                hovertemplate=f"%{{x:,.4g}} (%{{customdata:,}} blocks): %{{y:.2%}}"
                f"<extra>{label}</extra>",
            )
        )
    unit = "GiB of KV cache" if in_gib else "tokens"
    fig.update_layout(base_layout("", f"cache capacity ({unit})", log_x=True, height=420))
    titles = choices.titles("Token hit rate at every capacity (curve)")
    return figure_markup(selectable(fig, SELECTED, titles))


def _interval_band(line: pl.DataFrame, x: list, color: str, label: str) -> go.Scatter | None:
    """A sampled curve's 95% interval as a shaded band behind its line; None for an exact
    curve, or one from a warehouse written before ``mrc`` had the interval."""
    if "ci_low" not in line.columns or line["ci_low"].null_count() == line.height:
        return None
    keep = line["ci_low"].is_not_null().to_list()
    xs = [v for v, k in zip(x, keep, strict=True) if k]
    return go.Scatter(
        x=xs + xs[::-1],
        y=line["ci_high"].drop_nulls().to_list() + line["ci_low"].drop_nulls().to_list()[::-1],
        fill="toself",
        fillcolor=color,
        opacity=0.2,
        line={"width": 0},
        hoverinfo="skip",
        showlegend=False,
        name=f"{label} (95% interval)",
    )


def timeseries_figure(series: pl.DataFrame) -> dict[str, Any] | None:
    """The fleet's token hit rate over time: warm-up and drift. One line per policy and
    isolation at the capacity selected (the middle one as the page opens; the unbounded
    ceiling at every one): the chart, and its selector's options."""
    if series.is_empty():
        return None
    fig = go.Figure()
    # a log without dates (hash-id traces count from 0) is drawn in hours from its start, not
    # as dates in January 1970
    relative = series["bucket_start"].min().year == 1970
    if relative:
        hours = (series["bucket_start"].dt.epoch("s") / 3600).alias("bucket_start")
        series = series.with_columns(hours)
    caps = sorted(series["capacity_blocks"].drop_nulls().unique().to_list())
    options = [f"{c:,} blocks" for c in caps] or ["unbounded"]
    keys = series.select("policy", "isolation", "capacity_blocks").unique(maintain_order=True)
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
        name = plotly_text(f"{policy}{'' if mode == 'shared' else ', ' + mode}")
        for k in range(len(options)) if cap is None else [caps.index(cap)]:
            fig.add_trace(
                go.Scatter(
                    x=line["bucket_start"].to_list(),
                    y=line["token_hit_rate"].to_list(),
                    mode="lines",
                    name=name,
                    meta={"tscap": k},
                    line=policy_line(policy, mode),
                    hovertemplate=(
                        f"%{{x:.2f}} h: %{{y:.2%}}<extra>{name}</extra>"
                        if relative
                        else f"%{{x}}: %{{y:.2%}}<extra>{name}</extra>"
                    ),
                )
            )
    x_title = (
        "hours since the log's start (it carries no date; `ingest --start` sets one)"
        if relative
        else "arrival time (UTC)"
    )
    fig.update_layout(base_layout("", x_title))
    title = "Fleet token hit rate over time (warm-up, drift)"
    titles = {str(k): f"{title} — caches of {o}" for k, o in enumerate(options)}
    middle = len(options) // 2
    chart = selectable(fig, ["tscap"], titles, default={"tscap": middle})
    return {"chart": figure_markup(chart), "options": options, "selected": middle}


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


# --- tables ----------------------------------------------------------------------------------


def summary_items(row: dict[str, Any]) -> list[dict[str, str]]:
    """The trace table: rows of what and value."""
    span = "—"
    if row["first_arrival"] is not None:
        minutes = (row["last_arrival"] - row["first_arrival"]).total_seconds() / 60
        span = f"{row['first_arrival']:%Y-%m-%d %H:%M:%S} UTC, {minutes:,.1f} min"
        if row["first_arrival"].year == 1970:  # offsets from the start, as hash-id traces give
            span += " (relative times: the log carries no date; `ingest --start` sets one)"
    pairs = [
        ("Requests", f"{row['requests']:,}"),
        ("Rejected input lines", f"{row['rejected_lines']:,}"),
        ("Files", f"{row['files']:,}"),
        ("Tenants", f"{row['tenants']:,}"),
        ("Input tokens", f"{row['input_tokens']:,}"),
        ("Output tokens", f"{row['output_tokens']:,}"),
        ("Block lookups", f"{row['block_lookups']:,}"),
        ("Distinct blocks", f"{row['unique_blocks']:,}"),
        ("Block size (tokens)", str(row["block_sizes"] or "—")),
        ("First arrival, span", span),
        ("Block hashes", hash_words(row.get("hash_keys"))),
    ]
    return [{"what": what, "value": value} for what, value in pairs]


def hash_words(keys: str | None) -> str:
    """What the stored block hashes let a reader of the warehouse learn (``sources.hash_key``)."""
    if not keys:
        return "—"
    if keys == PLAIN:
        return (
            "plain (--hash-key-file none): anyone holding the warehouse can confirm a guessed "
            "prompt block by block"
        )
    if PLAIN in keys.split(", "):
        return f"mixed, some plain: {keys}"
    return f"keyed (key {keys}): no stored hash can be recomputed from a guess without the key"


def rate_rows(rates: pl.DataFrame) -> list[dict[str, Any]]:
    """The hit-rate table's rows (the fleet's alone when there is one tenant: its rows repeat
    the fleet's)."""
    if rates.filter(pl.col("tenant") != FLEET)["tenant"].n_unique() <= 1:
        rates = rates.filter(pl.col("tenant") == FLEET)
    out = []
    for r in rates.iter_rows(named=True):
        ci = "" if r["ci_low"] is None else f"{_pct(r['ci_low'])}–{_pct(r['ci_high'])}"
        if r["steady"] is False:
            ci = "cache never filled: no steady state"
        out.append(
            {
                "fleet": r["tenant"] == FLEET,
                "window": r["measure_window"],
                "tenant": "fleet" if r["tenant"] == FLEET else r["tenant"],
                "policy": r["policy"]
                + (f" ({r['policy_options']})" if r["policy_options"] else "")
                + (f", warm start {warm}" if (warm := r.get("warm_start")) not in (None, "cold")
                   else ""),  # fmt: skip
                "isolation": r["isolation"],
                "capacity_blocks": _count(r["capacity_blocks"]),
                "capacity_tokens": _count(r["capacity_tokens"]),
                "capacity_gib": ""
                if r["capacity_gib"] is None
                else f"{r['capacity_gib']:g} ({r['model']})",
                "requests": f"{r['requests']:,}",
                "input_tokens": f"{r['input_tokens']:,}",
                "hit_tokens": f"{r['hit_tokens']:,}",
                "cross_tenant_hit_tokens": f"{r['cross_tenant_hit_tokens']:,}",
                "token_hit_rate": _pct(r["token_hit_rate"]),
                "ci": ci,
                "request_hit_rate": _pct(r["request_hit_rate"]),
            }
        )
    return out


def _count(x: int | None) -> str:
    """A capacity: unbounded (∞) when NULL."""
    return "∞" if x is None else f"{x:,}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2%}"

"""The report page: self-contained, correct figures, names shown as text, and it renders in a
real browser. The warehouse's views: there by name for any DuckDB client, one freshness rule."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Settings
from prefixscope.analysis.structure.tables import StructureSettings
from prefixscope.dashboards.report import timeseries_figure
from prefixscope.ingest import IngestOptions
from prefixscope.stages import curve, ingest, report, savings, simulate, structure
from prefixscope.stages.curve import CurveStageSettings
from prefixscope.stages.ingest import IngestSettings
from prefixscope.stages.report import ReportSettings
from prefixscope.stages.savings import SavingsSettings
from prefixscope.stages.simulate import SimulateSettings
from tests.conftest import CHROMIUM, CHROMIUM_ARGS, mooncake_line, needs_chromium, open_page

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "figures", "needs_chromium", "tables"]

#: Every view a DuckDB client finds in a warehouse, by name.
VIEWS = (
    "fresh_runs",
    "latest_agent_sessions",
    "latest_disagg_fleets",
    "latest_first_new_blocks",
    "latest_fleet_hit_rates",
    "latest_fleet_replicas",
    "latest_hit_rates",
    "latest_hit_sources",
    "latest_miss_budget",
    "latest_misses_by_gap",
    "latest_mrc",
    "latest_plan",
    "latest_plan_slo_answers",
    "latest_plan_slo_disagg",
    "latest_plan_slo_fleets",
    "latest_plan_slo_windows",
    "latest_reuse_shares",
    "latest_savings",
    "latest_session_stats",
    "latest_shared_prefixes",
    "latest_structure_run",
    "latest_timeseries",
    "latest_validation",
    "latest_validation_events",
    "latest_validation_disagreements",
    "outcome_configurations",
    "reuse_shares",
    "run_history",
    "trace_summary",
)

#: Tenant names a page must show as text, never as markup.
MARKUP_TENANTS = ("<img src=x onerror=alert(1)>", "<b>bold</b>", "<script>alert(1)</script>")


def ingest_tenant(wh: Path, write_lines: Callable[..., Path], tenant: str, root: int) -> None:
    lines = [mooncake_line(timestamp=i * 100, hash_ids=[root, root + 1 + i % 5]) for i in range(30)]
    ingest.ingest_logs(
        wh,
        IngestSettings(
            inputs=(str(write_lines(lines)),),
            format="mooncake",
            options=IngestOptions(tenant=tenant),
        ),
    )


def build_warehouse(
    wh: Path, write_lines: Callable[..., Path], tenants: Sequence[str], curves: bool = False
) -> Path:
    """Tenants of 30 requests each; two policies at three capacities over two windows, the
    structure, the savings of lru at 4 blocks, and (``curves``) the LRU curve."""
    for k, tenant in enumerate(tenants):
        ingest_tenant(wh, write_lines, tenant, 1_000 * (k + 1))
    simulate.simulate_policies(
        wh,
        SimulateSettings(
            policies=("ceiling", "lru"),
            capacities=Capacities(blocks=(2, 4, 8)),
            measure=Settings(windows=("all", "last-half"), outcomes=True),
        ),
    )
    structure.find_structure(wh, StructureSettings(capacity_blocks=4))
    # priced by the roofline, the cost model whose words the page is checked for
    savings.price_savings(
        wh, SavingsSettings(policy="lru", capacity_blocks=4, cost_model="roofline")
    )
    if curves:
        curve.measure_curve(wh, CurveStageSettings())
    return wh


def count(con: duckdb.DuckDBPyConnection, view: str) -> int:
    return con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0]


@pytest.fixture
def warehouse_path(write_lines, tmp_path: Path) -> Path:
    """A warehouse over two tenants, two policies and three capacities."""
    return build_warehouse(tmp_path / "wh.duckdb", write_lines, ("alpha", "beta"))


@pytest.fixture
def page(warehouse_path: Path, tmp_path: Path) -> Path:
    return report.write_report(
        warehouse_path, ReportSettings(out=str(tmp_path / "out" / "report.html"))
    )


def test_the_page_is_self_contained_and_holds_the_figures(page: Path) -> None:
    html = page.read_text()
    # No resource is fetched from anywhere: every <script> is inline.
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link[^>]+href=", html)
    assert "Plotly.newPlot" in html
    # one chart over capacity, whose traces are every tenant's and window's
    (capacity,) = [f for f in figures(html) if "over capacity" in f[1]["title"]["text"]]
    assert {t["meta"]["tenant"] for t in capacity[0]} == {0, 1, 2}  # fleet, alpha, beta
    assert {t["meta"]["window"] for t in capacity[0]} == {0, 1}  # all, last-half
    assert '<option value="1">tenant alpha</option>' in html  # the tenant selector
    # fleet rows: 2 windows × 4 configs in the rates table, and the fleet's savings row
    shown = tables(html)
    rates, priced = shown["rates-table"], shown["savings"]
    assert [r[rates.columns.index("tenant")] for r in rates.rows].count("fleet") == 2 * (1 + 3)
    assert [r[0] for r in priced.rows] == ["fleet", "alpha", "beta"]
    assert priced.rows[0][priced.columns.index("requests")] == "60"  # the fleet's requests
    # The structure section: a hit-sources line per tenant and configuration, plain words on
    # what breaks reuse, reuse-time shares.
    assert "Tenant alpha, infinite cache: " in html and "Tenant beta, lru at 4 blocks: " in html
    assert {"shared-prefixes", "reuse-times"} <= set(shown)
    assert "first never-seen block" in html
    assert "miss cost is not measured" not in html and "No savings computed yet" not in html
    # priced on the fewest H100s that hold the model, its pool bounding the capacity
    assert "llama-3-8b</b> on <b>h100x1 (" in html
    assert "-block KV pool)</b>, cost model: <b>roofline</b>" in html
    assert "Decode time is unchanged by the prefix cache" in html


def test_a_stale_simulation_is_left_out_after_a_new_ingest(write_lines, tmp_path: Path) -> None:
    wh = tmp_path / "wh.duckdb"
    options = IngestOptions()
    ingest.ingest_logs(wh, IngestSettings((str(write_lines([mooncake_line()])),), options=options))
    simulate.simulate_policies(wh, SimulateSettings(policies=("ceiling",)))
    later = write_lines([mooncake_line(timestamp=5)])
    ingest.ingest_logs(wh, IngestSettings((str(later),), options=options))
    html = report.write_report(wh, ReportSettings(out=str(tmp_path / "r.html"))).read_text()
    assert "No simulation results yet" in html
    assert "No savings computed yet" in html


def test_every_view_is_in_the_warehouse_for_a_plain_duckdb_client(warehouse_path: Path) -> None:
    with duckdb.connect(str(warehouse_path)) as con:
        listed = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal")
        names = {n for (n,) in listed.fetchall()}
        counts = {v: count(con, v) for v in VIEWS}
        structure_run = con.execute("SELECT run_id FROM latest_structure_run").fetchall()
        commands = dict(con.execute("SELECT run_id, command FROM fresh_runs").fetchall())
    assert names == set(VIEWS)
    unwritten = {"latest_mrc", "latest_fleet_hit_rates", "latest_fleet_replicas", "latest_plan"}
    unwritten |= {"latest_miss_budget"}
    unwritten |= {"latest_validation", "latest_validation_disagreements"}
    unwritten |= {"latest_plan_slo_answers", "latest_plan_slo_fleets", "latest_validation_events"}
    unwritten |= {"latest_disagg_fleets", "latest_plan_slo_disagg"}
    # no log names sessions
    unwritten |= {"latest_plan_slo_windows", "latest_agent_sessions", "latest_misses_by_gap"}
    assert all(counts[v] == 0 for v in unwritten)  # no curve, no fleet run, no validation
    assert all(n > 0 for v, n in counts.items() if v not in unwritten), counts
    assert counts["latest_structure_run"] == 1 and commands[structure_run[0][0]] == "structure"
    assert counts["latest_hit_rates"] == 2 * 3 * 4  # windows × (fleet, alpha, beta) × configs
    assert counts["latest_savings"] == 3 and counts["latest_session_stats"] == 3


def test_every_latest_view_takes_the_newest_fresh_run_per_configuration(
    warehouse_path: Path, write_lines: Callable[..., Path]
) -> None:
    """A later simulation of one capacity replaces that capacity's rows in every view; the
    others keep the earlier run's. Savings of another configuration join the earlier ones. A
    new ingest leaves nothing fresh."""
    newer = simulate.simulate_policies(
        warehouse_path,
        SimulateSettings(
            policies=("lru",),
            capacities=Capacities(blocks=(4,)),
            measure=Settings(windows=("all", "last-half")),
        ),
    ).run_id

    def runs_by_capacity(con: duckdb.DuckDBPyConnection, view: str) -> dict[Any, set[str]]:
        rows = con.execute(
            f"SELECT capacity_blocks, list(DISTINCT run_id) FROM {view} "
            "WHERE policy = 'lru' GROUP BY ALL"
        ).fetchall()
        return {cap: set(runs) for cap, runs in rows}

    savings.price_savings(warehouse_path, SavingsSettings(policy="lru", capacity_blocks=8))
    with duckdb.connect(str(warehouse_path)) as con:
        rates = runs_by_capacity(con, "latest_hit_rates")
        series = runs_by_capacity(con, "latest_timeseries")
        priced = con.execute(
            "SELECT capacity_blocks, count(*) FROM latest_savings GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    assert priced == [(4, 3), (8, 3)]  # (fleet, alpha, beta) for each
    assert rates == series
    assert set(rates) == {2, 4, 8} and rates[4] == {newer}
    assert len(rates[2]) == 1 and rates[2] == rates[8] != {newer}

    ingest_tenant(warehouse_path, write_lines, "gamma", 9_000)
    with duckdb.connect(str(warehouse_path)) as con:
        left = {v: count(con, v) for v in VIEWS}
    assert all(left[v] == 0 for v in VIEWS if v.startswith("latest_")), left


@pytest.mark.browser
@needs_chromium
def test_the_page_renders_its_charts_in_headless_chromium_without_errors(
    page: Path, warehouse_path: Path, browser: Any
) -> None:
    with open_page(browser, page, "table#savings.dataTable") as p:
        tab = p.tab
        titles = [t.text_content() or "" for t in tab.locator(".js-plotly-plot .gtitle").all()]
        capacity = tab.locator(".js-plotly-plot").filter(has_text="over capacity")
        drawn = capacity.locator(".scatterlayer .trace").count()
        sources = tab.locator("#hit-sources li").count()
        opened = tab.evaluate("[...document.querySelectorAll('details')].filter(d => d.open)")
        tab.locator("#structure summary").click()  # its tables are set up when shown
        tab.wait_for_selector("table#shared-prefixes.dataTable")
        prefix_rows = tab.locator("#shared-prefixes tr").count()
        structure_shown = tab.locator("#structure").is_visible()
        savings_rows = [r.inner_text() for r in tab.locator("#savings tr").all()]
        decode_note = tab.locator("#decode-note").is_visible()
        tab.select_option("#select-tenant", label="tenant beta")
        tab.select_option("#select-window", label="last-half")
        beta = plotted(tab, "over capacity")
    assert p.errors == []
    assert all(u.startswith(("file://", "blob:")) for u in p.requests), p.requests
    assert sum("over capacity" in t for t in titles) == 1
    assert sum("over time" in t for t in titles) == 1
    # the fleet's lru curve and its ceiling, of window all; every other tenant's hidden
    assert drawn == 2
    assert "fleet, window: all" in next(t for t in titles if "over capacity" in t)
    # the selected tenant's and window's curve, as the view has it
    assert beta["title"] == "Token hit rate over capacity — tenant beta, window: last-half"
    assert beta["lines"]["lru"] == view_rates(warehouse_path, "beta", "last-half", "lru")
    assert opened == []  # every detail starts collapsed
    # (fleet, alpha, beta) × (infinite cache, lru): six hit-source lines; prefixes listed
    assert structure_shown and sources == 6 and prefix_rows >= 2
    # the savings section: a header, the fleet and both tenants, and the decode statement
    assert len(savings_rows) == 4 and savings_rows[1].startswith("fleet")
    assert [r.split("\t")[0] for r in savings_rows[2:]] == ["alpha", "beta"]
    assert "GPU-s saved per hour" in savings_rows[0] and decode_note


def plotted(tab: Any, title: str) -> dict[str, Any]:
    """What the chart whose title holds ``title`` shows now, from Plotly's own state: its
    title and each visible line's y values by name."""
    return tab.evaluate(
        """(title) => {
          const div = [...document.querySelectorAll('.js-plotly-plot')]
            .find(d => (d.layout.title.text || '').includes(title));
          const lines = {};
          div.data.filter(t => t.visible === true).forEach(t => { lines[t.name] = t.y; });
          return {title: div.layout.title.text, lines: lines};
        }""",
        title,
    )


def view_rates(wh: Path, tenant: str, window: str, policy: str) -> list[float]:
    """A tenant's token hit rates of one policy, shared, by capacity, from the view."""
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = con.execute(
            "SELECT token_hit_rate FROM latest_hit_rates WHERE tenant = ? "
            "AND measure_window = ? AND policy = ? AND isolation = 'shared' "
            "AND capacity_blocks IS NOT NULL ORDER BY capacity_blocks",
            [tenant, window, policy],
        ).fetchall()
    assert rows
    return [r[0] for r in rows]


@pytest.fixture
def markup_page(write_lines, tmp_path: Path) -> Path:
    """A page over tenants whose names are markup, with every section and chart filled."""
    wh = build_warehouse(tmp_path / "wh.duckdb", write_lines, MARKUP_TENANTS, curves=True)
    return report.write_report(wh, ReportSettings(out=str(tmp_path / "report.html")))


def test_names_with_markup_are_escaped_in_the_page_and_its_charts(markup_page: Path) -> None:
    html = markup_page.read_text()
    # Outside the charts: autoescaped text.
    for name in MARKUP_TENANTS:
        assert name not in html
        assert name.replace("<", "&lt;").replace(">", "&gt;") in html
    # In the charts (data and layout, JSON that spells "<" as \u003c): escaped for Plotly,
    # which renders some HTML in titles, legends, annotations and hover labels.
    blob = json.dumps(figures(html), ensure_ascii=False)
    assert "<b>bold" not in blob and "<img" not in blob
    assert "tenant &lt;b&gt;bold&lt;/b&gt;, window: all" in blob  # a title
    assert "lru — tenant &lt;img src=x onerror=alert(1)&gt;" in blob  # a curve's legend entry
    # In the tables' data (JSON for DataTables): escaped for HTML, shown as text.
    rates = tables(html)["rates-table"]
    shown = {r[rates.columns.index("tenant")] for r in rates.rows}
    assert {n.replace("<", "&lt;").replace(">", "&gt;") for n in MARKUP_TENANTS} < shown


def figures(html: str) -> list[Any]:
    """The data and layout of every Plotly figure of a page: those drawn as it loads, then
    those drawn when their section is opened (``data-figure``)."""
    decoder = json.JSONDecoder()
    out = []
    for m in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", html):
        data, end = decoder.raw_decode(html, m.end())
        layout, _ = decoder.raw_decode(html, re.compile(r",\s*").match(html, end).end())
        out.append([data, layout])
    for m in re.finditer(r'data-figure="([^"]*)"', html):
        fig = json.loads(unescape(m.group(1)))
        out.append([fig["data"], fig["layout"]])
    assert out
    return out


@pytest.mark.browser
@needs_chromium
def test_names_with_markup_show_as_text_in_headless_chromium(
    markup_page: Path, browser: Any
) -> None:
    with open_page(browser, markup_page, ".js-plotly-plot .main-svg") as p:
        tab = p.tab
        tab.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
        tab.wait_for_selector("table#rates-table.dataTable", state="attached")
        tab.select_option("#rates-table_wrapper .dt-length select", "-1")  # every row
        charts = {}
        for name in MARKUP_TENANTS:
            tab.select_option("#select-tenant", label=f"tenant {name}")
            charts[name] = (
                [t.text_content() or "" for t in tab.locator(".js-plotly-plot .gtitle").all()],
                [t.text_content() or "" for t in tab.locator(".js-plotly-plot .legendtext").all()],
            )
        tab.wait_for_timeout(300)  # an onerror handler would have fired by now
        text = tab.locator("body").inner_text()
        options = tab.locator("#select-tenant option").all_inner_texts()
        cells = tab.locator("#rates-table td").all_inner_texts()
        bold = tab.evaluate(
            "() => [...document.querySelectorAll('b, tspan')]"
            ".filter(e => e.tagName === 'B' || /bold|700/.test(e.getAttribute('style') || ''))"
            ".map(e => e.textContent)"
        )
        images = tab.locator("img").count()
        scripts = tab.evaluate("[...document.scripts].filter(s => s.text === 'alert(1)').length")
        hit_sources = tab.locator("#hit-sources li").all_inner_texts()
    assert p.dialogs == [] and p.errors == []
    assert images == 0 and scripts == 0  # no element from a name
    assert "bold" not in bold  # no <b> element (nor bold tspan of Plotly's) from a name
    for name in MARKUP_TENANTS:
        titles, legend = charts[name]
        assert name in text  # the lists show the name itself
        assert f"tenant {name}" in options  # so do the selector's options
        assert name in cells  # and the table's cells
        assert any(f"tenant {name}, window: all" in t for t in titles)  # and the titles
        assert any(f"tenant {name}" in t for t in legend)  # and the curve legends
        assert any(line.startswith(f"Tenant {name}, infinite cache: ") for line in hit_sources)


@dataclass(frozen=True)
class Table:
    """A table of the page as DataTables gets it: its headers and its rows of text (escaped
    for HTML, as the page holds them)."""

    columns: list[str]
    rows: list[list[str]]


def tables(html: str) -> dict[str, Table]:
    """Every DataTable of a page, by the id of its table element."""
    decoder = json.JSONDecoder()
    out = {}
    for m in re.finditer(r'querySelectorAll\("#([^:"]+):not\(\.dataTable\)"\)', html):
        start = html.index("let dt_args = ", m.end()) + len("let dt_args = ")
        args, _ = decoder.raw_decode(html, start)
        headers = re.findall(r"<th[^>]*>(.*?)</th>", args["table_html"])
        out[m.group(1)] = Table(headers, json.loads(args["data_json"]))
    return out


@pytest.mark.parametrize(
    ("start", "axis", "dated"),
    [
        # a hash-id trace counts from 0: no date, so hours from its start
        (datetime(1970, 1, 1, tzinfo=UTC), "hours since the log's start", False),
        (datetime(2026, 12, 4, 9, tzinfo=UTC), "arrival time (UTC)", True),
    ],
)
def test_the_time_axis_is_dates_only_when_the_log_has_them(
    start: datetime, axis: str, dated: bool
) -> None:
    series = pl.DataFrame(
        {
            "policy": ["lru"] * 3,
            "isolation": ["shared"] * 3,
            "capacity_blocks": [100] * 3,
            "bucket_start": [start + timedelta(minutes=30 * k) for k in range(3)],
            "token_hit_rate": [0.1, 0.2, 0.3],
        }
    )
    markup = timeseries_figure(series)["chart"]
    assert axis in markup
    assert ("1970-01-01" in markup) is False
    assert ("2026-12-04" in markup) is dated
    if not dated:
        assert '"x":[0.0,0.5,1.0]' in markup.replace(" ", "")

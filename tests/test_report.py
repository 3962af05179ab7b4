"""The report page: self-contained, correct figures, names shown as text, and it renders in a
real browser. The warehouse's views: there by name for any DuckDB client, one freshness rule."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Settings
from prefixscope.analysis.structure.tables import StructureSettings
from prefixscope.ingest import IngestOptions
from prefixscope.stages import curve, ingest, report, savings, simulate, structure
from prefixscope.stages.curve import CurveStageSettings
from prefixscope.stages.ingest import IngestSettings
from prefixscope.stages.report import ReportSettings
from prefixscope.stages.savings import SavingsSettings
from prefixscope.stages.simulate import SimulateSettings
from tests.conftest import mooncake_line

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (make test installs it)"
)

#: Every view a DuckDB client finds in a warehouse, by name.
VIEWS = (
    "fresh_runs",
    "latest_first_new_blocks",
    "latest_fleet_hit_rates",
    "latest_fleet_replicas",
    "latest_hit_rates",
    "latest_hit_sources",
    "latest_mrc",
    "latest_plan",
    "latest_plan_slo_answers",
    "latest_plan_slo_fleets",
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
MARKUP_TENANTS = ("<img src=x onerror=alert(1)>", "<b>bold</b>")


def ingest_tenant(wh: Path, write_lines: Callable[..., Path], tenant: str, root: int) -> None:
    lines = [mooncake_line(timestamp=i * 100, hash_ids=[root, root + 1 + i % 5]) for i in range(30)]
    ingest.run(
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
    simulate.run(
        wh,
        SimulateSettings(
            policies=("ceiling", "lru"),
            capacities=Capacities(blocks=(2, 4, 8)),
            measure=Settings(windows=("all", "last-half"), outcomes=True),
        ),
    )
    structure.run(wh, StructureSettings(capacity_blocks=4))
    savings.run(wh, SavingsSettings(policy="lru", capacity_blocks=4))
    if curves:
        curve.run(wh, CurveStageSettings())
    return wh


def count(con: duckdb.DuckDBPyConnection, view: str) -> int:
    return con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0]


@pytest.fixture
def warehouse_path(write_lines, tmp_path: Path) -> Path:
    """A warehouse over two tenants, two policies and three capacities."""
    return build_warehouse(tmp_path / "wh.duckdb", write_lines, ("alpha", "beta"))


@pytest.fixture
def page(warehouse_path: Path, tmp_path: Path) -> Path:
    return report.run(warehouse_path, ReportSettings(out=str(tmp_path / "out" / "report.html")))


def test_the_page_is_self_contained_and_holds_the_figures(page: Path) -> None:
    html = page.read_text()
    # No resource is fetched from anywhere: every <script> is inline.
    assert not re.search(r"<script[^>]+src=", html)
    assert not re.search(r"<link[^>]+href=", html)
    assert "Plotly.newPlot" in html
    assert "tenant alpha" in html and "tenant beta" in html  # per-tenant curves
    # fleet rows: 2 windows × 4 configs, and the fleet's savings
    assert html.count("<tr class='fleet'>") == 2 * (1 + 3) + 1
    assert "<td>60</td>" in html  # the fleet's request count
    # The structure section: a hit-sources line per tenant and configuration, plain words on
    # what breaks reuse, reuse-time shares.
    assert "Tenant alpha, infinite cache: " in html and "Tenant beta, lru at 4 blocks: " in html
    assert "id='shared-prefixes'" in html and "id='reuse-times'" in html
    assert "first never-seen block" in html
    assert "miss cost is not measured" not in html and "No savings computed yet" not in html
    # priced on the fewest H100s that hold the model, its pool bounding the capacity
    assert "llama-3-8b</b> on <b>h100x1 (" in html
    assert "-block KV pool)</b>, cost model: <b>roofline</b>" in html
    assert "Decode time is unchanged by the prefix cache" in html


def test_a_stale_simulation_is_left_out_after_a_new_ingest(write_lines, tmp_path: Path) -> None:
    wh = tmp_path / "wh.duckdb"
    options = IngestOptions()
    ingest.run(wh, IngestSettings((str(write_lines([mooncake_line()])),), options=options))
    simulate.run(wh, SimulateSettings(policies=("ceiling",)))
    later = write_lines([mooncake_line(timestamp=5)])
    ingest.run(wh, IngestSettings((str(later),), options=options))
    html = report.run(wh, ReportSettings(out=str(tmp_path / "r.html"))).read_text()
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
    unwritten |= {"latest_validation", "latest_validation_disagreements"}
    unwritten |= {"latest_plan_slo_answers", "latest_plan_slo_fleets", "latest_validation_events"}
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
    newer = simulate.run(
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

    savings.run(warehouse_path, SavingsSettings(policy="lru", capacity_blocks=8))
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


@contextmanager
def opened(page: Path) -> Iterator[tuple[Any, list[str], list[str], list[str]]]:
    """The page open in headless Chromium: the tab, errors (console and uncaught), dialogs
    that opened, and the URLs it requested."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    dialogs: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda e: errors.append(str(e)))

            def dismiss(d: Any) -> None:
                dialogs.append(d.message)
                d.dismiss()

            tab.on("dialog", dismiss)
            tab.on("request", lambda r: requests.append(r.url))
            tab.goto(page.as_uri(), wait_until="load")
            tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)
            yield tab, errors, dialogs, requests
        finally:
            browser.close()


@pytest.mark.browser
@needs_chromium
def test_the_page_renders_its_charts_in_headless_chromium_without_errors(page: Path) -> None:
    with opened(page) as (tab, errors, _, requests):
        titles = [t.text_content() or "" for t in tab.locator(".js-plotly-plot .gtitle").all()]
        plots = tab.locator(".js-plotly-plot")
        across_runs = plots.filter(has_text="across runs")  # the history's, counted apart
        curves = plots.locator(".scatterlayer .trace").count()
        curves -= across_runs.locator(".scatterlayer .trace").count()
        title = titles[0] if titles else None
        sources = tab.locator("#hit-sources li").count()
        prefix_rows = tab.locator("#shared-prefixes tr").count()
        structure_shown = tab.locator("#structure").is_visible()
        savings = tab.locator("#savings tr")
        savings_rows = [r.inner_text() for r in savings.all()]
        decode_note = tab.locator("#decode-note").is_visible()
    assert errors == []
    assert all(u.startswith("file://") for u in requests), requests
    over_capacity = [t for t in titles if "over capacity" in t]
    over_time = [t for t in titles if "over time" in t]
    assert len(over_capacity) == 2 * 3  # two windows × (fleet, alpha, beta)
    assert len(over_time) == 1
    # one lru curve per capacity chart (the ceiling is a shape), and in the time chart the
    # ceiling and the middle lru capacity are shown (the others are hidden in the legend)
    assert curves == len(over_capacity) + 2
    assert title is not None and "fleet" in title
    # (fleet, alpha, beta) × (infinite cache, lru): six hit-source lines; prefixes listed
    assert structure_shown and sources == 6 and prefix_rows >= 2
    # the savings section: a header, the fleet and both tenants, and the decode statement
    assert len(savings_rows) == 4 and savings_rows[1].startswith("fleet")
    assert [r.split("\t")[0] for r in savings_rows[2:]] == ["alpha", "beta"]
    assert "GPU-s saved per hour" in savings_rows[0] and decode_note


@pytest.fixture
def markup_page(write_lines, tmp_path: Path) -> Path:
    """A page over tenants whose names are markup, with every section and chart filled."""
    wh = build_warehouse(tmp_path / "wh.duckdb", write_lines, MARKUP_TENANTS, curves=True)
    return report.run(wh, ReportSettings(out=str(tmp_path / "report.html")))


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


def figures(html: str) -> list[Any]:
    """The data and layout of every Plotly figure of a page."""
    decoder = json.JSONDecoder()
    out = []
    for m in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", html):
        data, end = decoder.raw_decode(html, m.end())
        layout, _ = decoder.raw_decode(html, re.compile(r",\s*").match(html, end).end())
        out.append([data, layout])
    assert out
    return out


@pytest.mark.browser
@needs_chromium
def test_names_with_markup_show_as_text_in_headless_chromium(markup_page: Path) -> None:
    with opened(markup_page) as (tab, errors, dialogs, _):
        tab.wait_for_timeout(500)  # an onerror handler would have fired by now
        text = tab.locator("body").inner_text()
        titles = [t.text_content() or "" for t in tab.locator(".js-plotly-plot .gtitle").all()]
        legend = [t.text_content() or "" for t in tab.locator(".js-plotly-plot .legendtext").all()]
        bold = tab.evaluate(
            "() => [...document.querySelectorAll('b, tspan')]"
            ".filter(e => e.tagName === 'B' || /bold|700/.test(e.getAttribute('style') || ''))"
            ".map(e => e.textContent)"
        )
        images = tab.locator("img").count()
        hit_sources = tab.locator("#hit-sources li").all_inner_texts()
    assert dialogs == [] and errors == []
    assert images == 0
    assert "bold" not in bold  # no <b> element (nor bold tspan of Plotly's) from a name
    for name in MARKUP_TENANTS:
        assert name in text  # the tables and lists show the name itself
        assert any(f"tenant {name}," in t for t in titles)  # so do chart titles
        assert any(f"tenant {name}" in t for t in legend)  # and the curve legends
        assert any(line.startswith(f"Tenant {name}, infinite cache: ") for line in hit_sources)

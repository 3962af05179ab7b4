"""The report page's fleet section: there when the warehouse holds fleet runs (charts drawn by
Plotly in headless Chromium, one table row per configuration), absent otherwise; router names
shown as text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from prefixscope.analysis.fleet.settings import FleetSettings
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.stages import fleet, report
from prefixscope.stages.report import ReportSettings
from tests.conftest import Bundled, needs_chromium, open_page
from tests.test_report import figures

ROUTERS = ("round-robin", "session", "cache-aware")
REPLICAS = (2, 4)
#: A router name that is markup, written over one router's rows to check escaping.
MARKUP_ROUTER = "<img src=x onerror=alert(1)><b>rr</b>"


def fleet_warehouse(bundled: Bundled, folder: Path) -> Path:
    """The bundled trace through 3 routers × 2 replica counts, windows all and steady."""
    folder.mkdir(parents=True, exist_ok=True)
    wh = bundled.copy_to(folder)
    fleet.simulate_fleets(
        wh,
        FleetSettings(
            routers=ROUTERS,
            replicas=REPLICAS,
            capacities=Capacities(blocks=[2_000]),
            windows=("all", "steady"),
        ),
    )
    return wh


@pytest.fixture(scope="module")
def fleet_wh(bundled_warehouse: Bundled, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fleet_warehouse(bundled_warehouse, tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def fleet_page(fleet_wh: Path) -> Path:
    return report.write_report(fleet_wh, ReportSettings(out=str(fleet_wh.parent / "report.html")))


@contextmanager
def opened(
    page: Path, wait_for: str | None, browser: Any
) -> Iterator[tuple[Any, list[str], list[str]]]:
    """The page open in the session's headless Chromium (``conftest.open_page``): the tab,
    errors (console and uncaught) and dialogs that opened. ``wait_for``: a selector to wait
    for."""
    with open_page(browser, page, wait_for) as p:
        yield p.tab, p.errors, p.dialogs


def rows(wh: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql).fetchall()


def expected_hit_rate(wh: Path, router: str, replicas: int) -> str:
    """The table's token hit rate of one configuration, from the view: its steady window."""
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = con.execute(
            "SELECT token_hit_rate FROM latest_fleet_hit_rates WHERE tenant = '*' "
            "AND measure_window = 'steady' AND router = ? AND replicas = ?",
            [router, replicas],
        ).fetchall()
    assert len(rows) == 1 and rows[0][0] is not None
    return f"{rows[0][0]:.2%}"


def drawn(tab: Any) -> tuple[list[int], int, list[str]]:
    """What the fleet charts show now: the points of each scatter, the busy-time bars, the
    charts' titles."""
    plots = tab.locator(".fleet-pair .js-plotly-plot")
    points = [
        plots.nth(i).locator(".scatterlayer .trace .points path").count()
        for i in range(plots.count())
    ]
    bars = tab.locator("#fleet ~ div:not(#miss-budget) .js-plotly-plot .barlayer .point").count()
    titles = [t.text_content() or "" for t in tab.locator(".js-plotly-plot .gtitle").all()]
    return points, bars, titles


def budget_drawn(tab: Any) -> tuple[list[str], int, str]:
    """The miss budget chart now: its routers (the y axis), its visible parts, its title."""
    chart = tab.locator("#miss-budget .js-plotly-plot")
    routers = [t.text_content() or "" for t in chart.locator(".yaxislayer-above .ytick text").all()]
    parts = chart.locator(".barlayer .trace").count()
    return routers, parts, chart.locator(".gtitle").text_content() or ""


def top_lever(wh: Path, replicas: int) -> str:
    """The view's largest part with a lever (never seen aside) among the steady rows."""
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = con.execute(
            "SELECT lever, share, router, gpu_seconds FROM latest_miss_budget WHERE tenant = '*' "
            "AND measure_window = 'steady' AND replicas = ? AND lever IS NOT NULL "
            "AND part <> 'never_seen' AND share > 0 ORDER BY share DESC LIMIT 1",
            [replicas],
        ).fetchall()
    lever, share, router, gpu_s = rows[0]
    return (
        f"most to win back: {lever}, {share:.1%} of the tokens ({gpu_s:,.0f} GPU-s) under {router}"
    )


@pytest.mark.browser
@needs_chromium
def test_the_fleet_section_shows_charts_and_a_row_per_configuration(
    fleet_page: Path, fleet_wh: Path, browser: Any
) -> None:
    wait = "#fleet ~ .fleet-pair .js-plotly-plot .main-svg"
    with opened(fleet_page, wait, browser) as (tab, errors, _):
        heading = tab.locator("h2#fleet")
        heading_shown = heading.is_visible()
        heading_text = heading.inner_text()
        note = tab.locator("#fleet-note").inner_text()
        groups = tab.locator("#select-fleet option").all_inner_texts()
        svgs = tab.locator(".fleet-pair .js-plotly-plot .main-svg").count()
        first = drawn(tab)
        budget = budget_drawn(tab)
        headline = tab.locator("#miss-budget-headline").inner_text()
        tab.select_option("#select-fleet", index=1)  # the other replica count
        second = drawn(tab)
        tab.locator("#fleet-details summary").click()  # the table is set up when shown
        tab.wait_for_selector("table#fleet-table.dataTable")
        header = [h.strip() for h in tab.locator("#fleet-table thead th").all_inner_texts()]
        body = [r.inner_text().split("\t") for r in tab.locator("#fleet-table tbody tr").all()]
    assert errors == []
    assert heading_shown and heading_text.startswith("Fleet")
    assert "Each replica has its own prefix cache" in note and "Window: steady" in note
    configurations = len(ROUTERS) * len(REPLICAS)
    # one chart per question (hit rate vs imbalance, vs TTFT), a replica count selected
    assert [g.split(" ")[0] for g in groups] == [str(n) for n in REPLICAS]
    assert svgs >= 2
    for (points, bars, titles), replicas in zip((first, second), REPLICAS, strict=True):
        assert points == [len(ROUTERS)] * 2  # a point per router in each scatter
        assert sum("Busy time per replica" in t for t in titles) == 1
        assert bars == len(ROUTERS) * replicas  # a bar per replica of every router
    # the miss budget of the first group: a stacked bar per router, the lever in its title
    routers, parts, title = budget
    assert sorted(routers) == sorted(ROUTERS) and parts >= 3
    assert title == f"Where the prompt tokens went: {top_lever(fleet_wh, REPLICAS[0])}"
    # the hit-rate section opens with the biggest part to win back of every fleet simulated
    share, gpu_s, router = rows(
        fleet_wh,
        "SELECT share, gpu_seconds, router FROM latest_miss_budget WHERE tenant = '*' AND "
        "measure_window = 'all' AND lever IS NOT NULL AND part <> 'never_seen' "
        "ORDER BY share DESC LIMIT 1",
    )[0]
    assert headline.startswith(
        f"The most prompt tokens to win back in the fleets simulated: {share:.1%} "
        f"({gpu_s:,.0f} GPU-s), "
    )
    assert f"under {router} at" in headline and "no earlier prompt named" in headline
    assert len(body) == configurations
    assert {(r[0], r[1]) for r in body} == {(t, str(n)) for t in ROUTERS for n in REPLICAS}
    col = header.index("token hit rate")
    (session_4,) = [r for r in body if r[0] == "session" and r[1] == "4"]
    assert session_4[header.index("window")] == "steady"
    assert session_4[col] == expected_hit_rate(fleet_wh, "session", 4)


@pytest.mark.browser
@needs_chromium
def test_a_page_without_fleet_runs_has_no_fleet_section(
    bundled_warehouse: Bundled, tmp_path: Path, browser: Any
) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "report.html")))
    html = page.read_text()
    assert 'id="fleet"' not in html and "fleet-table" not in html
    assert "miss-budget-headline" not in html
    with opened(page, "h1", browser) as (tab, errors, dialogs):
        fleet_headings = tab.locator("#fleet").count()
        fleet_tables = tab.locator("#fleet-table").count()
    assert errors == [] and dialogs == []
    assert fleet_headings == 0 and fleet_tables == 0


@pytest.mark.browser
@needs_chromium
def test_router_names_with_markup_show_as_text(
    fleet_wh: Path, tmp_path: Path, browser: Any
) -> None:
    wh = tmp_path / "markup.duckdb"
    wh.write_bytes(fleet_wh.read_bytes())
    with duckdb.connect(str(wh)) as con:
        for table in ("fleet_hit_rates", "fleet_replicas"):
            con.execute(
                f"UPDATE {table} SET router = ? WHERE router = 'round-robin'", [MARKUP_ROUTER]
            )
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "report.html")))
    html = page.read_text()
    # In the page: autoescaped text. In the charts' JSON: escaped for Plotly.
    assert MARKUP_ROUTER not in html
    assert "&lt;img src=x onerror=alert(1)&gt;&lt;b&gt;rr&lt;/b&gt;" in html
    blob = json.dumps(figures(html), ensure_ascii=False)
    assert "<img" not in blob and "<b>rr" not in blob
    with opened(page, "#fleet ~ .fleet-pair .js-plotly-plot .main-svg", browser) as (
        tab,
        errors,
        dialogs,
    ):
        tab.locator("#fleet-details summary").click()
        tab.wait_for_selector("table#fleet-table.dataTable")
        tab.wait_for_timeout(300)  # an onerror handler would have fired by now
        images = tab.locator("img").count()
        table = tab.locator("#fleet-table").text_content() or ""
        labels = [t.text_content() or "" for t in tab.locator(".fleet-pair .textpoint").all()]
    assert errors == [] and dialogs == [] and images == 0
    assert MARKUP_ROUTER in table
    assert labels.count(MARKUP_ROUTER) == 2  # its point label in each scatter


HBM_ROWS = [
    # (the row's deployment columns, words its capacity shows, words it must not)
    ({"deployment": "h100x1", "kv_pool_blocks": 885, "exceeds_hbm": False},
     ["on h100x1", "885-block KV pool"], ["what-if"]),
    ({"deployment": "h100x1", "kv_pool_blocks": 885, "exceeds_hbm": True},
     ["on h100x1", "more than h100x1's HBM holds"], []),
    ({"deployment": None, "kv_pool_blocks": None, "exceeds_hbm": True},
     ["more than one h100's HBM holds"], [" on "]),
    ({"deployment": None, "kv_pool_blocks": None, "exceeds_hbm": None}, [], ["HBM", " on "]),
]  # fmt: skip


@pytest.mark.parametrize(("columns", "shown", "hidden"), HBM_ROWS)
def test_the_table_and_titles_show_the_deployment_and_a_what_if(columns, shown, hidden) -> None:  # type: ignore[no-untyped-def]
    import polars as pl

    from prefixscope.dashboards.fleet import group_title, table_rows

    row = {
        "router": "cache-aware", "replicas": 4, "capacity_blocks": 885, "capacity_gib": None,
        "policy": "lru", "load_scale": 1.0, "measure_window": "all", "never_filled": False,
        "token_hit_rate": 0.1, "ceiling_token_hit_rate": 0.3, "ttft_p50_s": 0.1,
        "ttft_p95_s": 0.2, "ttft_p99_s": 0.3, "load_imbalance": 1.0, "prefill_imbalance": 1.0,
        "dram_blocks": 0, "store_blocks": None, "store_unbounded": None, "model": "llama-3-8b",
        "gpu": "h100", **columns,
    }  # fmt: skip
    (shown_row,) = table_rows(pl.DataFrame([row]))
    title = group_title(row, {"load_scale": False, "policy": False, "model": False, "gpu": False})
    for text in (shown_row["capacity"], title):
        assert all(w in text for w in shown) and not any(w in text for w in hidden), text


@pytest.mark.browser
@needs_chromium
def test_the_page_says_whether_each_tier_pays_for_itself(
    bundled_warehouse: Bundled, tmp_path: Path, browser: Any
) -> None:
    from prefixscope.analysis.fleet.tierspec import TierSpec
    from prefixscope.dashboards.fleet import chosen_rows
    from prefixscope.dashboards.tiers import tier_verdict
    from prefixscope.dashboards.views import read_view

    wh = bundled_warehouse.copy_to(tmp_path)
    stores = (None, TierSpec(64.0), TierSpec(1024.0))
    fleet.simulate_fleets(
        wh,
        FleetSettings(
            replicas=(4,), deployments=("h100x1",), capacities=Capacities(), stores=stores
        ),
    )
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "report.html")))
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = chosen_rows(read_view(con, "latest_fleet_hit_rates").filter(tenant="*"))
    says = tier_verdict(rows)
    with opened(page, "#tiers ~ div .js-plotly-plot .main-svg", browser) as (tab, errors, _):
        verdict = tab.locator("#tier-verdict").inner_text()
        points = tab.locator("#tiers ~ div .js-plotly-plot .scatterlayer .points path").count()
    assert errors == []
    assert verdict == says and "at this load" in says
    assert points == len(stores) - 1  # a point per store; the fleet without one is not a tier

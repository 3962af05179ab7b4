"""The report page: self-contained, correct figures, and it renders in a real browser."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from prefixscope import warehouse
from prefixscope.analysis.savings import run_savings
from prefixscope.analysis.simulate import Capacities, Settings, run_simulation
from prefixscope.analysis.structure import StructureSettings, run_structure
from prefixscope.dashboards import build_report
from prefixscope.ingest import IngestOptions, ingest_files
from tests.conftest import mooncake_line

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def page(wh, write_lines, tmp_path: Path) -> Path:
    """A report over two tenants, two policies and three capacities."""
    _, con = wh
    for tenant, root in (("alpha", 1_000), ("beta", 2_000)):
        lines = [
            mooncake_line(timestamp=i * 100, hash_ids=[root, root + 1 + i % 5]) for i in range(30)
        ]
        with warehouse.recorded_run(con, "ingest", {}) as run_id:
            ingest_files(
                con, [write_lines(lines)], "mooncake", IngestOptions(tenant=tenant), run_id
            )
    run_simulation(
        con,
        ["ceiling", "lru"],
        Capacities(blocks=[2, 4, 8]),
        Settings(windows=("all", "last-half"), outcomes=True),
    )
    run_structure(con, StructureSettings(capacity_blocks=4))
    run_savings(con, policy="lru", capacity_blocks=4)
    return build_report(con, tmp_path / "out" / "report.html", "wh.duckdb")


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
    assert "llama-3-8b</b> on <b>h100</b>, cost model: <b>roofline</b>" in html
    assert "Decode time is unchanged by the prefix cache" in html


def test_a_stale_simulation_is_left_out_after_a_new_ingest(wh, write_lines, tmp_path: Path) -> None:
    _, con = wh
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        ingest_files(con, [write_lines([mooncake_line()])], "mooncake", IngestOptions(), run_id)
    run_simulation(con, ["ceiling"])
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        ingest_files(
            con, [write_lines([mooncake_line(timestamp=5)])], "mooncake", IngestOptions(), run_id
        )
    html = build_report(con, tmp_path / "r.html", "wh").read_text()
    assert "No simulation results yet" in html
    assert "No savings computed yet" in html


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (make test installs it)")
def test_the_page_renders_its_charts_in_headless_chromium_without_errors(page: Path) -> None:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            tab = browser.new_page()
            tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda e: errors.append(str(e)))
            requests: list[str] = []
            tab.on("request", lambda r: requests.append(r.url))
            tab.goto(page.as_uri(), wait_until="load")
            tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)
            titles = [t.text_content() or "" for t in tab.locator(".js-plotly-plot .gtitle").all()]
            curves = tab.locator(".js-plotly-plot .scatterlayer .trace").count()
            title = titles[0] if titles else None
            sources = tab.locator("#hit-sources li").count()
            prefix_rows = tab.locator("#shared-prefixes tr").count()
            structure_shown = tab.locator("#structure").is_visible()
            savings = tab.locator("#savings tr")
            savings_rows = [r.inner_text() for r in savings.all()]
            decode_note = tab.locator("#decode-note").is_visible()
        finally:
            browser.close()
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

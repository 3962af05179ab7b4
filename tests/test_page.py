"""The report page as a dashboard: one colour per policy everywhere, the SLO plan's cost against
TTFT and the engines' hit rate against load where the warehouse holds them, the plotly.js bundle
it inlines, and the demo's page in Chromium: at most ten screens tall as it opens, every table
at most 20 rows, details collapsed, and selectors that redraw the charts with the view's figures.
How fast it loads is a benchmark (``benchmarks/page_load.py``, in ``make bench``), not a test:
a loaded machine would fail a time limit here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import plotly.graph_objects as go
import plotly.offline
import polars as pl
import pytest

from prefixscope.dashboards.engines import engine_figure
from prefixscope.dashboards.figures import (
    BUNDLED_TRACES,
    DASHES,
    EXTRA_COLOURS,
    PLOTLY_VERSION,
    POLICY_COLOURS,
    figure_markup,
    plotly_bundle,
    policy_colour,
    policy_line,
)
from prefixscope.dashboards.report import build_report
from prefixscope.dashboards.tables import PAGE_ROWS
from tests.conftest import DemoRun, needs_chromium, open_page
from tests.test_report import figures, tables

# --- colours ---------------------------------------------------------------------------------


def test_every_policy_has_its_own_colour_and_each_isolation_its_own_dash() -> None:
    colours = [policy_colour(p) for p in POLICY_COLOURS]
    assert len(set(colours)) == len(colours)  # s3fifo and belady are no longer both blue
    assert not set(EXTRA_COLOURS) & set(colours)
    assert len(set(DASHES.values())) == len(DASHES)


@pytest.mark.parametrize(
    ("a", "b", "same_colour"),
    [
        (("s3fifo", "shared"), ("belady", "salted"), False),
        (("lru", "shared"), ("lru", "salted"), True),
        (("belady", "shared"), ("belady", "salted"), True),
        (("ttl", "shared", "ttl=60"), ("ttl", "shared"), False),
        (("my-plugin", "shared"), ("lru", "shared"), False),
    ],
)
def test_two_curves_are_told_apart_by_colour_or_dash(a, b, same_colour) -> None:  # type: ignore[no-untyped-def]
    la, lb = policy_line(*a), policy_line(*b)
    assert la != lb
    assert (la["color"] == lb["color"]) == same_colour
    assert policy_line(*a) == la  # the same policy is drawn the same way every time


def test_the_bundle_is_the_plotly_js_that_plotly_writes_for_and_draws_only_its_traces() -> None:
    assert plotly.offline.get_plotlyjs_version() == PLOTLY_VERSION
    assert f"v{PLOTLY_VERSION}" in plotly_bundle()[:200]
    assert {"scatter", "bar"} <= BUNDLED_TRACES
    with pytest.raises(ValueError, match="heatmap"):
        figure_markup(go.Figure(go.Heatmap(z=[[1]])))


# --- sections from other commands' tables -------------------------------------------------------

#: Fleets the SLO planner searched: (load, caching, replicas, router, TTFT p95 s, $/h, meets).
SLO_FLEETS = [
    (1.0, True, 2, "cache-aware", 0.4, 8.0, True),
    (1.0, True, 1, "cache-aware", 1.9, 4.0, False),
    (1.0, True, 3, "round-robin", 0.3, 12.0, True),
    (1.0, False, 3, "round-robin", 0.9, 12.0, True),
    (1.0, False, 2, "round-robin", 2.5, 8.0, False),
    (2.0, True, 4, "cache-aware", 0.5, 16.0, True),
    (2.0, False, 6, "round-robin", 0.8, 24.0, True),
]


def slo_tables(con: duckdb.DuckDBPyConnection) -> None:
    """``plan --slo``'s tables with their documented columns, and the views the page reads
    (made here under the tests' own table names: the views replace any the schema has)."""
    con.execute(
        "CREATE TABLE t_slo_fleets (run_id VARCHAR, load_scale DOUBLE, prefix_caching BOOLEAN, "
        "engine VARCHAR, deployment VARCHAR, gpu VARCHAR, tp INTEGER, replicas INTEGER, "
        "gpus INTEGER, router VARCHAR, dram_gib_per_replica DOUBLE, store_gib DOUBLE, "
        "kv_pool_gib_per_gpu DOUBLE, token_hit_rate DOUBLE, ttft_p95_s DOUBLE, "
        "ttft_p99_s DOUBLE, tpot_p95_s DOUBLE, usd_per_hour DOUBLE, meets_slo BOOLEAN, "
        "binding VARCHAR)"
    )
    for load, caching, n, router, ttft, usd, meets in SLO_FLEETS:
        con.execute(
            "INSERT INTO t_slo_fleets VALUES ('r', ?, ?, 'vllm', 'h100x1', 'h100', 1, ?, ?, ?, "
            "0, 0, 60, ?, ?, ?, 0.02, ?, ?, 'ttft')",
            [load, caching, n, n, router, 0.3 if caching else 0.0, ttft, ttft * 1.2, usd, meets],
        )
    con.execute(
        "CREATE TABLE t_slo_answers AS SELECT 'r' AS run_id, 1.0 AS load_scale, "
        "'ttft_p95<=1s' AS slo, true AS prefix_caching, true AS met, 'h100x1' AS deployment, "
        "2 AS replicas, 2 AS gpus, 'cache-aware' AS router, 0.0 AS dram_gib_per_replica, "
        "0.0 AS store_gib, 8.0 AS usd_per_hour, 0.4 AS ttft_p95_s, 'ttft' AS binding, "
        "5 AS fleets_searched, 1 AS gpus_saved, 2920.0 AS usd_saved_per_month"
    )
    con.execute("CREATE OR REPLACE VIEW latest_plan_slo_fleets AS SELECT * FROM t_slo_fleets")
    con.execute("CREATE OR REPLACE VIEW latest_plan_slo_answers AS SELECT * FROM t_slo_answers")


def test_the_fleet_section_shows_cost_against_ttft_when_the_warehouse_holds_an_slo_plan(
    wh: tuple[Path, duckdb.DuckDBPyConnection], tmp_path: Path
) -> None:
    from prefixscope.dashboards.slo import slo_section

    _, con = wh
    assert slo_section(con) is None  # no SLO plan: no chart
    slo_tables(con)
    section = slo_section(con)
    assert section is not None and section["loads"] == ["load ×1", "load ×2"]
    (data, layout), *_ = figures(section["chart"])
    assert layout["meta"]["select"] == ["sloload"]
    for load_index, load in enumerate((1.0, 2.0)):
        mine = [t for t in data if t["meta"]["sloload"] == load_index]
        points = [t for t in mine if t["marker"]["symbol"] != "star"]
        expected = [f for f in SLO_FLEETS if f[0] == load]
        assert sum(len(t["x"]) for t in points) == len(expected)  # one point per fleet
        for caching in (True, False):
            met = [f for f in expected if f[1] == caching and f[6]]
            cheapest = min(met, key=lambda f: (f[5], f[4]))
            (star,) = [
                t
                for t in mine
                if t["marker"]["symbol"] == "star" and ("without" in t["name"]) != caching
            ]
            assert (star["x"], star["y"]) == ([cheapest[4]], [cheapest[5]])
        # fleets without a cache are squares, those with one circles
        for t in points:
            assert t["marker"]["symbol"].startswith("circle" if "prefix" in t["name"] else "square")
    answers = section["answers"]
    assert [a["saved"] for a in answers] == ["1 GPUs, $2,920 a month"]


#: (load, caching, window start h, window end h, met, gpus): each window sized alone.
SLO_WINDOWS = [
    (1.0, True, 0.0, 0.25, True, 1),
    (1.0, True, 0.25, 0.5, True, 2),
    (1.0, True, 0.5, 0.75, False, None),
    (1.0, False, 0.0, 0.25, True, 2),
    (1.0, False, 0.25, 0.5, True, 3),
    (1.0, False, 0.5, 0.75, True, 3),
]


def _slo_windows(con: duckdb.DuckDBPyConnection) -> None:
    """:data:`SLO_WINDOWS` as ``latest_plan_slo_windows``."""
    con.execute(
        "CREATE TABLE t_slo_windows (run_id VARCHAR, load_scale DOUBLE, prefix_caching BOOLEAN, "
        "window_start_s DOUBLE, window_end_s DOUBLE, requests BIGINT, met BOOLEAN, gpus INTEGER)"
    )
    for load, caching, start, end, met, gpus in SLO_WINDOWS:
        con.execute(
            "INSERT INTO t_slo_windows VALUES ('r', ?, ?, ?, ?, 10, ?, ?)",
            [load, caching, start * 3600, end * 3600, met, gpus],
        )
    con.execute("CREATE OR REPLACE VIEW latest_plan_slo_windows AS SELECT * FROM t_slo_windows")


def test_the_slo_section_draws_gpus_window_by_window_beside_the_static_fleet(
    wh: tuple[Path, duckdb.DuckDBPyConnection], demo_run: DemoRun, tmp_path: Path
) -> None:
    """``--per-window``: a step of GPUs per window (a gap where none meets) and the static
    answer flat over the same span, with and without the cache; the page says so."""
    from prefixscope.dashboards.slo import slo_section

    _, con = wh
    slo_tables(con)
    assert slo_section(con)["gpus_chart"] is None  # no per-window rows: no chart
    _slo_windows(con)
    section = slo_section(con)
    (data, layout), *_ = figures(section["gpus_chart"])
    mine = [t for t in data if t["meta"]["sloload"] == 0]
    by_name = {t["name"]: t for t in mine}
    scaled = by_name["each window sized alone, prefix caching"]
    on = [w for w in SLO_WINDOWS if w[0] == 1.0 and w[1]]
    assert [y for y in scaled["y"] if y is not None] == [g for w in on if w[4] for g in (w[5],) * 2]
    assert scaled["x"][:2] == [0.0, 0.25]
    static = by_name["static, prefix caching"]  # the answer of slo_tables: 2 GPUs
    assert static["y"] == [2, 2] and static["x"] == [0.0, 0.75]
    assert "each window sized alone, no cache" in by_name
    # on a page with a fleet section (the demo's warehouse, a copy)
    copy = tmp_path / "demo.duckdb"
    shutil.copy(demo_run.warehouse, copy)
    with duckdb.connect(str(copy)) as demo:
        assert 'id="slo-windows"' not in build_report(demo, tmp_path / "a.html", "d").read_text()
        _slo_windows(demo)
        assert 'id="slo-windows"' in build_report(demo, tmp_path / "b.html", "d").read_text()


def test_a_warehouse_without_an_slo_plan_or_engines_shows_neither(
    wh: tuple[Path, duckdb.DuckDBPyConnection], tmp_path: Path
) -> None:
    path, con = wh
    html = build_report(con, tmp_path / "r.html", path.name).read_text()
    assert 'id="slo"' not in html and 'id="engines"' not in html


ENGINE_ROWS = [
    # (engine, load, token hit rate, running blocks mean)
    ("vllm", 1.0, 0.40, 100.0),
    ("vllm", 2.0, 0.30, 300.0),
    ("vllm", 4.0, 0.20, 700.0),
    ("sglang", 1.0, 0.41, 90.0),
    ("sglang", 2.0, 0.35, 250.0),
    ("sglang", 4.0, 0.28, 600.0),
]


def fleet_rates(rows: list[tuple[Any, ...]], engine: bool = True) -> pl.DataFrame:
    frame = pl.DataFrame(
        {
            "tenant": "*",
            "measure_window": "all",
            "router": "cache-aware",
            "replicas": 4,
            "capacity_blocks": 885,
            "policy": "lru",
            "engine": [r[0] for r in rows],
            "load_scale": [r[1] for r in rows],
            "token_hit_rate": [r[2] for r in rows],
            "running_blocks_mean": [r[3] for r in rows],
            "running_blocks_p95": [r[3] * 2 for r in rows],
            "preemptions": [0 for _ in rows],
        }
    )
    return frame if engine else frame.drop("engine", "running_blocks_mean", "running_blocks_p95")


@pytest.mark.parametrize(
    ("rows", "engine", "shown"),
    [
        (ENGINE_ROWS, True, True),
        (ENGINE_ROWS, False, False),  # a warehouse from before the engines
        ([r for r in ENGINE_ROWS if r[1] == 1.0], True, False),  # one load scale
    ],
)
def test_hit_rate_against_load_is_drawn_per_engine_when_there_are_several_loads(
    rows, engine, shown
) -> None:  # type: ignore[no-untyped-def]
    drawn = engine_figure(fleet_rates(rows, engine))
    assert (drawn is not None) == shown
    if drawn is None:
        return
    (data, _), *_ = figures(drawn["chart"])
    lines = {t["name"]: (t["x"], t["y"]) for t in data}
    for name in ("vllm", "sglang"):
        mine = sorted((r[1], r[2]) for r in rows if r[0] == name)
        assert lines[name] == ([x for x, _ in mine], [y for _, y in mine])


# --- the demo's page in Chromium -----------------------------------------------------------------

#: The page as it opens at 1,400 × 900 is at most ten screens tall.
MAX_HEIGHT_PX = 9_000
#: Charts drawn and every DataTable set up (but those of closed sections, set up when opened).
READY = (
    "() => [...document.querySelectorAll('table[id]')].every(t =>"
    " t.classList.contains('dataTable') || t.closest('details:not([open])'))"
    " && [...document.querySelectorAll('.js-plotly-plot')].every(p => p.querySelector('.main-svg'))"
)


@pytest.mark.flow
@pytest.mark.slow
@pytest.mark.browser
@needs_chromium
def test_the_demo_page_is_a_dashboard(demo_run: DemoRun, browser: Any, tmp_path: Path) -> None:
    assert demo_run.returncode == 0, demo_run.stdout
    page = tmp_path / "report.html"  # a copy: the page is read as a user opens it, from disk
    shutil.copy(demo_run.page, page)
    with open_page(browser, page) as p:
        tab = p.tab
        tab.wait_for_function(READY, timeout=20_000)
        height = tab.evaluate("document.documentElement.scrollHeight")
        rows = tab.evaluate(
            "[...document.querySelectorAll('table.dataTable')].map(t => [t.id,"
            " [...t.querySelectorAll('tbody tr')].filter(r => r.offsetParent !== null).length])"
        )
        opened = tab.evaluate("[...document.querySelectorAll('details')].filter(d => d.open)")
        colours = tab.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].flatMap(d => d.data"
            ".filter(t => t.line && t.line.color && t.mode && t.mode.startsWith('lines'))"
            ".map(t => [d.layout.title.text, t.name, t.line.color, t.line.dash || 'solid']))"
        )
        tab.select_option("#select-tenant", label="tenant chat")
        chat = plotted(tab, "over capacity")
        tab.select_option("#select-window", label="last-half")
        chat_late = plotted(tab, "over capacity")
    assert p.errors == [] and p.dialogs == []
    assert height <= MAX_HEIGHT_PX, height
    assert rows and all(n <= PAGE_ROWS for _, n in rows), rows
    assert opened == []
    # each policy one colour on every chart, distinct from the others'; salted its own dash
    style: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for _, name, colour, dash in colours:
        policy = name.split(",")[0].split(" ")[0]
        isolation = "salted" if ", salted" in name else "shared"
        if policy in POLICY_COLOURS and policy != "ceiling":  # a ceiling is a dashed line
            style.setdefault((policy, isolation), set()).add((colour, dash))
    assert style == {(p, i): {(POLICY_COLOURS[p], DASHES[i])} for p, i in style}
    assert {p for p, _ in style} == {"lru", "fifo", "s3fifo", "belady"}
    assert {i for _, i in style} == {"shared", "salted"}
    # changing the tenant and the window redraws the chart with that tenant's rates
    html = page.read_text()
    demo = tables(html)
    assert "rates-table" in demo
    for shown, window in ((chat, "all"), (chat_late, "last-half")):
        assert shown["title"] == f"Token hit rate over capacity — tenant chat, window: {window}"
        assert shown["lines"]["lru"] == view_rates(demo_run.warehouse, "chat", window)
    assert chat["lines"]["lru"] != chat_late["lines"]["lru"]


def plotted(tab: Any, title: str) -> dict[str, Any]:
    from tests.test_report import plotted as shown

    return shown(tab, title)


def view_rates(wh: Path, tenant: str, window: str) -> list[float]:
    from tests.test_report import view_rates as rates

    return rates(wh, tenant, window, "lru")

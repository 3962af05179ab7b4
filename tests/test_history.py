"""The trend across runs (``run_history`` and the page's "Across runs"), and the short answer a
run prints: two consecutive runs of the flow's stages on two hours of synthetic logs, into one
warehouse."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Scenario, Settings
from prefixscope.dashboards.summary import MAX_LINES, summarize
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest, report, savings, simulate
from prefixscope.stages.ingest import IngestSettings
from prefixscope.stages.report import ReportSettings
from prefixscope.stages.savings import SavingsSettings
from prefixscope.stages.simulate import SimulateSettings
from prefixscope.synthetic import Workload, write_bailian
from tests.test_report import figures

TENANTS = ("alpha", "beta")
PRICED = Scenario("lru", 128)


def write_hour(folder: Path, hour: int) -> Path:
    """Hour ``hour`` (0, 1, ...) of a two-tenant service: its own sessions, a file of its own."""
    workload = Workload(
        sessions=40, tenants=TENANTS, start_s=3600.0 * hour, first_chat_id=1_000_000 * hour
    )
    return write_bailian(folder / f"hour{hour}.jsonl", workload, seed=hour)


def run_like_the_flow(wh: Path, log: Path, page: Path) -> str:
    """The flow's stages that the trend reads: ingest, simulate (keeping the priced
    configuration's outcomes), savings, report; the simulate run's id."""
    settings = IngestSettings((str(log),), "bailian", IngestOptions(tenant_from="type"))
    assert ingest.ingest_logs(wh, settings).rejected == 0
    run_id = simulate.simulate_policies(
        wh,
        SimulateSettings(
            policies=("ceiling", "lru", "belady"),
            capacities=Capacities(blocks=(32, PRICED.capacity_blocks, 512)),
            isolations=("shared", "salted"),
            measure=Settings(windows=("all", "steady"), outcomes=True),
            outcomes_for=PRICED,
        ),
    ).run_id
    savings.price_savings(wh, SavingsSettings(policy="lru", capacity_blocks=PRICED.capacity_blocks))
    report.write_report(wh, ReportSettings(out=str(page)))
    return run_id


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    folder = tmp_path_factory.mktemp("history")
    wh, page = folder / "wh.duckdb", folder / "report.html"
    runs = [run_like_the_flow(wh, write_hour(folder, h), page) for h in (0, 1)]
    return wh, page, runs


def test_the_view_holds_each_run_per_tenant_newest_first(two_runs) -> None:  # type: ignore[no-untyped-def]
    wh, _, runs = two_runs
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = con.execute(
            "SELECT run_id, tenant, policy, isolation, capacity_blocks, requests, "
            "token_hit_rate, gpu_seconds_saved_per_hour, effective_capacity_blocks "
            "FROM run_history"
        ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [
        (run, tenant) for run in reversed(runs) for tenant in ("*", *TENANTS)
    ]
    assert {(r[2], r[3], r[4]) for r in rows} == {("lru", "shared", 128)}
    assert all(r[6] is not None and r[7] is not None and r[8] is None for r in rows)
    # the second run measured both hours, the first only the first hour
    fleet = {r[0]: r[5] for r in rows if r[1] == "*"}
    assert 0 < fleet[runs[0]] < fleet[runs[1]]


def test_the_page_shows_both_runs_and_marks_this_one(two_runs) -> None:  # type: ignore[no-untyped-def]
    _, page, _ = two_runs
    html = page.read_text()
    assert 'id="history"' in html and "2 runs of this warehouse" in html
    trends = [data for data, layout in figures(html) if "across runs" in layout["title"]["text"]]
    assert len(trends) == 2  # hit rate and savings; no effective capacity without validate
    for data in trends:
        lines = {t["name"]: t for t in data}
        assert set(lines) == {"fleet", "tenant alpha", "tenant beta", "this run"}
        assert len(lines["fleet"]["x"]) == 2
        newest = max(lines["fleet"]["x"])
        assert lines["this run"]["x"] == [newest] * 3  # the fleet and both tenants


def test_the_fleets_effective_capacity_comes_from_a_validate_run_over_the_same_data(
    two_runs, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from prefixscope import warehouse
    from prefixscope.dashboards.history import history_section
    from prefixscope.dashboards.views import read_view

    wh = tmp_path / "wh.duckdb"
    wh.write_bytes(two_runs[0].read_bytes())
    with warehouse.connect(wh) as con:
        assert read_view(con, "run_history")["effective_capacity_blocks"].null_count() == 6
        with warehouse.recorded_run(con, "validate", {}) as run_id:  # after the second run
            validated(con, run_id, {"*": 300, "alpha": 300})
        filled = read_view(con, "run_history")
        section = history_section(con)
    by_run = {
        run: dict(zip(rows["tenant"], rows["effective_capacity_blocks"], strict=True))
        for (run,), rows in filled.group_by(["run_id"])
    }
    newest, older = two_runs[2][1], two_runs[2][0]
    assert by_run[newest] == {"*": 300, "alpha": None, "beta": None}  # the fleet's cache
    assert set(by_run[older].values()) == {None}  # validated other data
    assert section is not None and len(section["figures"]) == 3


def validated(con: duckdb.DuckDBPyConnection, run_id: str, capacity: dict[str, int]) -> None:
    """``validation`` rows of ``run_id`` (any other required column a placeholder); the table
    is created when this version has none."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS validation "
        "(run_id VARCHAR NOT NULL, tenant VARCHAR NOT NULL, capacity_blocks BIGINT NOT NULL)"
    )
    required = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'validation' AND is_nullable = 'NO' "
        "AND column_name NOT IN ('run_id', 'tenant', 'capacity_blocks')"
    ).fetchall()
    fill = "".join(
        f", {chr(39) + 'x' + chr(39) if kind == 'VARCHAR' else 0}::{kind} AS {name}"
        for name, kind in required
    )
    for tenant, blocks in capacity.items():
        con.execute(
            "INSERT INTO validation BY NAME SELECT ? AS run_id, ? AS tenant, "
            f"?::BIGINT AS capacity_blocks{fill}",
            [run_id, tenant, blocks],
        )


def test_the_short_answer_fits_and_names_the_figures(two_runs) -> None:  # type: ignore[no-untyped-def]
    wh, page, _ = two_runs
    with duckdb.connect(str(wh), read_only=True) as con:
        answer = summarize(con, page, wh)
    lines = answer.lines()
    assert len(lines) <= MAX_LINES
    text = "\n".join(lines)
    for label in ("trace:", "ceiling:", "policies:", "gap:", "tenants:", "saves:", "page:"):
        assert label in text
    assert "at 128 blocks" in text and "belady, the offline optimum" in text
    assert "salted" in text and f"duckdb {wh} " in text
    assert "## prefixscope fleet report" in answer.markdown()

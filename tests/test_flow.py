"""The fleet_report flow, run for real on Prefect's local server, on the bundled trace."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from prefixscope.analysis.cost.deployment import memory_split, parse_deployment
from prefixscope.analysis.cost.models import resolve_model

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def test_fleet_report_flow_ingests_simulates_and_reports(
    prefect_server, sample_path, tmp_path
) -> None:
    from prefect.client.orchestration import get_client

    from prefixscope.pipelines.fleet_report import FlowParameters, fleet_report

    wh, page = tmp_path / "wh.duckdb", tmp_path / "report.html"
    params = FlowParameters(
        inputs=(str(sample_path),),
        warehouse_path=str(wh),
        report_path=str(page),
        capacities_blocks=(4_000, 64_000),
        metrics_path=str(tmp_path / "wh.prom"),
    )
    state = fleet_report(params, return_state=True)
    assert state.is_completed()
    outcome = state.result()
    assert 'prefixscope_token_hit_ratio{block_size="512"' in (tmp_path / "wh.prom").read_text()
    assert (outcome.lines, outcome.accepted, outcome.rejected) == (12_031, 12_031, 0)
    assert Path(outcome.report).stat().st_size > 1_000_000 and "Plotly.newPlot" in page.read_text()

    con = duckdb.connect(str(wh), read_only=True)
    commands = con.execute("SELECT command, status FROM runs ORDER BY started_at").fetchall()
    assert commands == [
        ("ingest", "succeeded"),
        ("simulate", "succeeded"),
        ("curve", "succeeded"),
        ("structure", "succeeded"),
        ("fleet", "succeeded"),
        ("plan", "succeeded"),
        ("plan-slo", "succeeded"),
        ("savings", "succeeded"),
        ("report", "succeeded"),
    ]
    # the fleet step: every router at 4 and 8 replicas, the logged traffic and twice it, each
    # replica one h200x8 serving the flow's model at its own KV pool, priced like the savings
    fleet = con.execute(
        "SELECT count(DISTINCT router), list(DISTINCT replicas ORDER BY replicas), "
        "list(DISTINCT load_scale ORDER BY load_scale), list(DISTINCT capacity_blocks), "
        "list(DISTINCT cost_model), list(DISTINCT deployment), list(DISTINCT exceeds_hbm) "
        "FROM fleet_hit_rates WHERE tenant = '*'"
    ).fetchone()
    pool = memory_split(
        resolve_model("deepseek-v3"), parse_deployment("h200x8"), block_size=512
    ).kv_pool_blocks
    assert fleet == (6, [4, 8], [1.0, 2.0], [pool], ["measured"], ["h200x8"], [False])
    assert (
        con.execute(
            "SELECT sum(replicas) FROM (SELECT DISTINCT router, replicas, "
            "load_scale FROM fleet_replicas)"
        ).fetchone()[0]
        == 6 * 2 * 12
    )
    # the planner answered for the fleet, from the flow's own results, and the page opens with it
    planned = con.execute(
        "SELECT kind, policy, reached FROM plan WHERE tenant = '*' ORDER BY kind, policy"
    ).fetchall()
    assert ("capacity", "lru", True) in planned and planned[-1][0] == "configuration"
    html = page.read_text()
    assert html.index('id="plan"') < html.index('id="cards"') < html.index("over cache capacity")
    rates = dict(
        con.execute(
            "SELECT coalesce(capacity_blocks, -1), token_hit_rate FROM hit_rates "
            "WHERE tenant = '*' AND measure_window = 'all' AND policy IN ('ceiling', 'lru')"
        ).fetchall()
    )
    # the grid, and the pool of the H100 the savings price (see the fleet's pool above)
    assert set(rates) == {-1, 4_000, 64_000, pool}
    assert rates[4_000] < rates[64_000] < rates[-1] == pytest.approx(0.3736, abs=5e-4)
    # The curve ends at the ceiling: at the working set LRU holds every block.
    curve = dict(
        con.execute(
            "SELECT capacity_blocks, token_hit_rate FROM mrc WHERE tenant = '*' "
            "AND measure_window = 'all' AND policy = 'lru'"
        ).fetchall()
    )
    assert len(curve) >= 200 and curve[max(curve)] == pytest.approx(rates[-1], abs=1e-12)
    assert (curve[4_000], curve[64_000]) == (rates[4_000], rates[64_000])  # it holds them too
    policies = {p for (p,) in con.execute("SELECT DISTINCT policy FROM hit_rates").fetchall()}
    assert policies == {"ceiling", "lru", "fifo", "s3fifo", "belady"}
    windows = {
        w for (w,) in con.execute("SELECT DISTINCT measure_window FROM hit_rates").fetchall()
    }
    assert windows == {"all", "last-half", "steady"}
    assert con.execute("SELECT count(*) FROM hit_rate_timeseries").fetchone()[0] > 0
    # The structure stage simulated the middle capacity and its attribution adds up.
    sources = con.execute(
        "SELECT capacity_blocks, hit_tokens, own_session_tokens + shared_prefix_tokens "
        "+ other_tenant_tokens FROM hit_sources WHERE tenant = '*' AND policy = 'lru'"
    ).fetchall()
    assert sources == [(64_000, sources[0][1], sources[0][1])]
    assert "id='hit-sources'" in page.read_text()
    # the savings stage priced the lru outcomes at the KV pool of h200x8, with the measured
    # kernels (no calibrated model of deepseek-v3 on the H200 is held)
    outcomes = con.execute(
        "SELECT DISTINCT policy, capacity_blocks FROM request_outcomes"
    ).fetchall()
    assert outcomes == [("lru", pool)]
    saved = con.execute(
        "SELECT cost_model, requests, prefill_gpu_seconds_no_cache > "
        "prefill_gpu_seconds_with_cache, deployment, gpus, kv_pool_blocks FROM savings "
        "WHERE tenant = '*'"
    ).fetchall()
    assert saved == [("measured", 12_031, True, "h200x8", 8, pool)]
    assert "Decode time is unchanged" in outcome.savings
    con.close()

    # The run is on the server's record, under the flow's name, completed.
    import anyio

    async def recorded() -> tuple[str, str]:
        async with get_client() as client:
            run = await client.read_flow_run(state.state_details.flow_run_id)
            flow = await client.read_flow(run.flow_id)
            return flow.name, run.state.type.value

    assert anyio.run(recorded) == ("fleet_report", "COMPLETED")


def test_the_synthetic_logs_name_holds_no_tenant_name(tmp_path: Path) -> None:
    """A tenant name may hold ``/`` or be 64 characters long; the synthetic log beside the
    warehouse is named by a digest of them, so the flow never fails on its file name (after
    its first ingest has committed) and two tenant lists never share a file."""
    from prefixscope.pipelines.fleet_report import synthesize

    wh = str(tmp_path / "wh.duckdb")
    one = Path(synthesize.fn(wh, ["team/a", "x" * 64], 512))
    two = Path(synthesize.fn(wh, ["team", "a"], 512))
    assert one.parent == two.parent == tmp_path and one != two
    assert one.stat().st_size > 0 and two.stat().st_size > 0

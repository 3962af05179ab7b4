"""The fleet_report flow with its simulations fanned out on a real Dask cluster (two worker
processes), against the same simulations run in this process."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest

pytestmark = [pytest.mark.flow, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():  # type: ignore[no-untyped-def]
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    from distributed import LocalCluster

    from prefixscope.analysis.fanout import close_clients

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as c:
        yield c
        close_clients()  # the stages keep theirs open for the process's life


def test_the_flow_runs_every_stage_with_its_simulations_on_the_dask_workers(
    prefect_server, cluster, sample_path, tmp_path
) -> None:
    """The flow's defaults on the bundled hour, its simulations fanned out on the cluster: every
    stage's tables, the page, the metrics file and the server's record, and the stored hit
    rates equal to the same grid simulated in this process."""
    import anyio
    from distributed import Client, get_task_stream
    from prefect.client.orchestration import get_client

    from prefixscope.analysis.cost.deployment import memory_split, parse_deployment
    from prefixscope.analysis.cost.models import resolve_model
    from prefixscope.analysis.simulation.grid import simulate_grid
    from prefixscope.analysis.simulation.scenarios import Settings, scenarios
    from prefixscope.analysis.trace.load import load_trace
    from prefixscope.pipelines.fleet_report import FlowParameters, fleet_report

    wh, page = tmp_path / "wh.duckdb", tmp_path / "report.html"
    capacities = [4_000, 64_000]
    with Client(cluster.scheduler_address) as client, get_task_stream(client) as stream:
        params = FlowParameters(
            inputs=(str(sample_path),),
            warehouse_path=str(wh),
            report_path=str(page),
            capacities_blocks=tuple(capacities),
            metrics_path=str(tmp_path / "wh.prom"),
            dask_address=cluster.scheduler_address,
        )
        state = fleet_report(params, return_state=True)
    assert state.is_completed()
    outcome = state.result()
    assert 'prefixscope_token_hit_ratio{block_size="512"' in (tmp_path / "wh.prom").read_text()
    assert (outcome.lines, outcome.accepted, outcome.rejected) == (12_031, 12_031, 0)
    assert Path(outcome.report).stat().st_size > 1_000_000 and "Plotly.newPlot" in page.read_text()

    # Every scenario was one task on the cluster, spread over both workers.
    policies = ["ceiling", "lru", "fifo", "s3fifo", "belady"]
    pool = memory_split(resolve_model("deepseek-v3"), parse_deployment("h200x8"), block_size=512)
    grid = scenarios(policies, sorted([*capacities, pool.kv_pool_blocks]))
    ran = [t for t in stream.data if "simulate_scenario" in t["key"]]
    assert len(ran) == len(grid)
    assert len({t["worker"] for t in ran}) == 2

    con = duckdb.connect(str(wh), read_only=True)
    commands = con.execute("SELECT command, status FROM runs ORDER BY started_at").fetchall()
    stages = ["ingest", "simulate", "curve", "structure", "fleet", "plan", "plan-slo"]
    assert commands == [(c, "succeeded") for c in [*stages, "savings", "report"]]
    # the fleet step: every router at 4 and 8 replicas, the logged traffic and twice it, each
    # replica one h200x8 serving the flow's model at its own KV pool, priced like the savings
    fleet = con.execute(
        "SELECT count(DISTINCT router), list(DISTINCT replicas ORDER BY replicas), "
        "list(DISTINCT load_scale ORDER BY load_scale), list(DISTINCT capacity_blocks), "
        "list(DISTINCT cost_model), list(DISTINCT deployment), list(DISTINCT exceeds_hbm) "
        "FROM fleet_hit_rates WHERE tenant = '*'"
    ).fetchall()
    assert fleet == [(6, [4, 8], [1.0, 2.0], [pool.kv_pool_blocks], ["measured"], ["h200x8"],
                      [False])]  # fmt: skip
    replicas = con.execute(
        "SELECT sum(replicas) FROM (SELECT DISTINCT router, replicas, load_scale "
        "FROM fleet_replicas)"
    ).fetchall()
    assert replicas == [(6 * 2 * 12,)]
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
    # the grid, and the pool of the H200s the savings price (see the fleet's pool above)
    assert set(rates) == {-1, *capacities, pool.kv_pool_blocks}
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
    stored_policies = {
        p for (p,) in con.execute("SELECT DISTINCT policy FROM hit_rates").fetchall()
    }
    assert stored_policies == set(policies)
    windows = {
        w for (w,) in con.execute("SELECT DISTINCT measure_window FROM hit_rates").fetchall()
    }
    assert windows == {"all", "last-half", "steady"}
    assert con.execute("SELECT count(*) FROM hit_rate_timeseries").fetchall()[0][0] > 0
    # The structure stage simulated the middle capacity and its attribution adds up.
    sources = con.execute(
        "SELECT capacity_blocks, hit_tokens, own_session_tokens + shared_prefix_tokens "
        "+ other_tenant_tokens FROM hit_sources WHERE tenant = '*' AND policy = 'lru'"
    ).fetchall()
    assert sources == [(64_000, sources[0][1], sources[0][1])]
    assert "id='hit-sources'" in html
    # the savings stage priced the lru outcomes at the KV pool of h200x8, with the measured
    # kernels (no calibrated model of deepseek-v3 on the H200 is held); the priced scenario's
    # per-request outcomes came back from its worker
    outcomes = con.execute("SELECT DISTINCT policy, capacity_blocks FROM request_outcomes")
    assert outcomes.fetchall() == [("lru", pool.kv_pool_blocks)]
    saved = con.execute(
        "SELECT cost_model, requests, prefill_gpu_seconds_no_cache > "
        "prefill_gpu_seconds_with_cache, deployment, gpus, kv_pool_blocks FROM savings "
        "WHERE tenant = '*'"
    ).fetchall()
    assert saved == [("measured", 12_031, True, "h200x8", 8, pool.kv_pool_blocks)]
    assert "Decode time is unchanged" in outcome.savings

    # what the workers computed equals the same scenarios computed here (the whole window)
    stored = con.execute(
        "SELECT policy, coalesce(capacity_blocks, -1), hit_tokens FROM hit_rates "
        "WHERE tenant = '*' AND measure_window = 'all' AND policy IN ('ceiling', 'lru', 'fifo') "
        "ORDER BY 1, 2"
    ).fetchall()
    here_grid = [s for s in grid if s.policy in ("ceiling", "lru", "fifo")]
    here = simulate_grid(load_trace(con), here_grid, Settings(windows=("all",)))
    con.close()
    expected = sorted(
        (r["policy"], r["capacity_blocks"] or -1, r["hit_tokens"])
        for r in here.hit_rates
        if r["tenant"] == "*"
    )
    assert stored == expected

    # The run is on the server's record, under the flow's name, completed.
    async def recorded() -> tuple[str, str]:
        async with get_client() as client:
            run = await client.read_flow_run(state.state_details.flow_run_id)
            flow = await client.read_flow(run.flow_id)
            return flow.name, run.state.type.value

    assert anyio.run(recorded) == ("fleet_report", "COMPLETED")


def test_a_grid_curve_on_the_dask_workers_equals_the_one_computed_here(cluster) -> None:
    from prefixscope.analysis.curves.grid import grid_curve
    from prefixscope.analysis.curves.settings import CurveSettings
    from prefixscope.analysis.trace.csr import build_trace

    # Three tenants' conversations of 1..6 turns over shared system prompts.
    rng = np.random.default_rng(7)
    requests, tenants = [], []
    for i in range(600):
        system = int(rng.integers(0, 4))
        turns = int(rng.integers(1, 7))
        requests.append([system] + [10_000 + i * 10 + k for k in range(turns)])
        tenants.append(f"t{system % 3}")
    trace = build_trace(requests, [512 * len(r) for r in requests], tenants, 512)
    points = np.array([1, 4, 16, 64, 256, 1024])
    settings = CurveSettings(policy="fifo", windows=("all", "last-half"), workers=1)
    here = grid_curve(trace, points, settings)
    there = grid_curve(trace, points, replace(settings, dask_address=cluster.scheduler_address))
    assert [(g.tenant, g.window) for g in there.groups] == [
        (g.tenant, g.window) for g in here.groups
    ]
    for a, b in zip(here.groups, there.groups, strict=True):
        assert np.array_equal(a.hit_tokens, b.hit_tokens)
        assert np.array_equal(a.input_tokens, b.input_tokens)
    fleet = next(g for g in here.groups if g.tenant == "*" and g.window == "all")
    assert fleet.hit_tokens[0] < fleet.hit_tokens[-1]  # it rises: the comparison is not vacuous


@pytest.mark.parametrize("router", ["round-robin", "random", "session"])
def test_each_replica_of_a_fixed_router_runs_as_a_task_and_equals_the_run_here(
    cluster, bundled_trace, router
) -> None:
    from prefixscope.analysis.fleet.grid import tables
    from prefixscope.analysis.fleet.run import Fleet
    from prefixscope.analysis.fleet.tables import Pricing

    grid = [Fleet(router, 4, 3_000, load_scale=2.0)]
    # the miss budget reads every replica's cache: kept, the configuration is one task
    assert len(_fleet_here_and_there(cluster, bundled_trace, grid, seed=1)[2]) == 1
    here, there, ran = _fleet_here_and_there(cluster, bundled_trace, grid, seed=1, budget=False)
    assert len(ran) == 4  # one task per replica
    a, b = here[0], there[0]
    for name in ("replica", "hit_tokens", "ttft", "done_at", "busy", "steps", "filled_at"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    pricing = Pricing("llama-3-8b", "h100", "roofline")
    for x, y in zip(tables(bundled_trace, here, ["all"], pricing),
                    tables(bundled_trace, there, ["all"], pricing), strict=True):  # fmt: skip
        assert x.equals(y)
    assert a.hit_tokens.sum() > 0 and a.ttft.max() > 0


def test_a_fleet_grid_runs_one_task_per_configuration_and_equals_the_run_here(
    cluster, bundled_trace
) -> None:
    from prefixscope.analysis.fleet.grid import tables
    from prefixscope.analysis.fleet.run import Fleet
    from prefixscope.analysis.fleet.tables import Pricing

    # stateful and fixed routers, so both kinds of configuration run as whole tasks
    grid = [Fleet(r, n, 2_000) for r in ("cache-aware", "round-robin", "kv-aware") for n in (2, 4)]
    here, there, ran = _fleet_here_and_there(cluster, bundled_trace, grid, seed=2)
    assert len(ran) == len(grid)  # one task per configuration, none per replica
    assert len({t["worker"] for t in ran}) == 2
    pricing = Pricing("llama-3-8b", "h100", "roofline")
    windows = ["all", "steady"]
    mine, theirs = (tables(bundled_trace, o, windows, pricing) for o in (here, there))
    for x, y in zip(mine, theirs, strict=True):
        assert x.equals(y)
    assert len({int(o.hit_tokens.sum()) for o in here}) > 1  # the routers differ: not vacuous


def test_the_plans_replays_on_the_cluster_equal_the_ones_here(cluster, bundled_trace) -> None:
    from prefixscope.analysis.plan.capacity import hit_tokens_at
    from prefixscope.stages.plan import PlanSettings, _hits_at

    pairs = [("lru", 3_000), ("lru", 3_016), ("fifo", 3_000), ("s3fifo", 3_016)]
    here = hit_tokens_at(bundled_trace, pairs)
    there = _hits_at(
        bundled_trace, pairs, PlanSettings(workers=None, dask_address=cluster.scheduler_address)
    )
    assert sorted(here) == sorted(there) == sorted(pairs)
    for pair in pairs:
        assert np.array_equal(here[pair], there[pair]), pair
    assert here[("lru", 3_016)].sum() >= here[("lru", 3_000)].sum() > 0


def test_the_trace_is_scattered_once_however_often_it_is_loaded(cluster, bundled_trace) -> None:
    from dataclasses import replace as copy_of

    from prefixscope.analysis import fanout
    from prefixscope.analysis.fleet.run import Traffic

    address = cluster.scheduler_address
    first = fanout.scattered(address, bundled_trace)
    again = copy_of(bundled_trace)  # another object with the same content, as a stage loads it
    assert again is not bundled_trace
    assert fanout.scattered(address, again).key == first.key
    traffic = Traffic(np.zeros(bundled_trace.n_requests, np.int64))
    before = {k: f.key for k, f in fanout._SCATTERED.items()}
    fanout.fan_out(lambda shared, item: item, (again, traffic), [1, 2], dask_address=address)
    after = {k: f.key for k, f in fanout._SCATTERED.items()}
    new = [k for k in after if k not in before]
    assert len(new) == 1 and after[new[0]].startswith("Traffic")  # only the traffic was sent
    assert first.key in after.values()  # the trace's first copy is still the one used


def test_a_pool_of_forked_workers_equals_the_run_here(bundled_trace) -> None:
    from prefixscope.analysis.simulation.scenarios import Settings, scenarios
    from prefixscope.stages.simulate import SimulateSettings, simulate_scenarios

    grid = scenarios(["lru", "fifo", "belady"], [2_000, 16_000])
    measure = Settings(windows=("all", "steady"))
    here = simulate_scenarios(bundled_trace, grid, measure, SimulateSettings(workers=1))
    there = simulate_scenarios(bundled_trace, grid, measure, SimulateSettings(workers=2))
    assert here.hit_rates == there.hit_rates
    assert len({r["hit_tokens"] for r in here.hit_rates if r["tenant"] == "*"}) > 1


def _fleet_here_and_there(cluster, trace, grid, seed, budget=True):  # type: ignore[no-untyped-def]
    """The fleet stage's grid in this process and on the cluster, with random output lengths,
    priced by the llama-3-8b roofline on an H100 (``budget``: keeping the miss budget); and the
    cluster's fleet tasks."""
    from distributed import Client, get_task_stream

    from prefixscope.analysis.cost.gpus import resolve_gpu
    from prefixscope.analysis.cost.models import resolve_model
    from prefixscope.analysis.fleet.grid import simulate_grid
    from prefixscope.analysis.fleet.run import Engine, Traffic
    from prefixscope.analysis.fleet.settings import FleetSettings
    from prefixscope.analysis.fleet.stepcost import from_roofline

    traffic = Traffic(np.random.default_rng(seed).integers(0, 400, trace.n_requests))
    engine = Engine(from_roofline(resolve_model("llama-3-8b"), resolve_gpu("h100")))
    here = simulate_grid(trace, traffic, grid, engine, FleetSettings(miss_budget=budget))
    remote = FleetSettings(workers=None, dask_address=cluster.scheduler_address, miss_budget=budget)
    with Client(cluster.scheduler_address) as client, get_task_stream(client) as stream:
        there = simulate_grid(trace, traffic, grid, engine, remote)
    return here, there, [t for t in stream.data if "fleet_task" in t["key"]]


def test_the_slo_search_on_the_dask_workers_equals_the_search_here(cluster) -> None:
    from distributed import Client, get_task_stream

    from prefixscope.analysis.cost.gpus import GPUS
    from prefixscope.analysis.cost.models import resolve_model
    from prefixscope.analysis.cost.prices import Prices
    from prefixscope.analysis.fleet.run import Traffic
    from prefixscope.analysis.fleet.stepcost import from_roofline
    from prefixscope.analysis.plan.slo import parse_slo
    from prefixscope.analysis.plan.slo_plan import plan_search
    from prefixscope.analysis.plan.slo_settings import PlanSloSettings
    from prefixscope.analysis.plan.slo_tables import answers_table, fleets_table
    from prefixscope.analysis.plan.space import replica_of
    from prefixscope.analysis.trace.csr import build_trace

    # 300 conversations over four system prompts, arriving within a minute
    rng = np.random.default_rng(3)
    turns = rng.integers(1, 8, 300)
    requests = [[int(rng.integers(0, 4)), *(50_000 + i * 8 + k for k in range(turns[i]))]
                for i in range(300)]  # fmt: skip
    times = np.sort(rng.uniform(0, 60, len(requests)))
    trace = build_trace(requests, [512 * len(r) for r in requests], ["t"] * 300, 512, times)
    traffic = Traffic(rng.integers(1, 200, trace.n_requests))
    shape = resolve_model("llama-3-8b")
    replicas = [replica_of("h100x1", shape, 512, "bf16", from_roofline(shape, GPUS["h100"]))]
    slo = parse_slo("ttft-p95=0.4")
    settings = PlanSloSettings(("h100x1",), slo.text, (20.0,), ("session",))
    here = plan_search(trace, traffic, replicas, slo, settings, Prices())
    remote = replace(settings, workers=None, dask_address=cluster.scheduler_address)
    with Client(cluster.scheduler_address) as client, get_task_stream(client) as stream:
        there = plan_search(trace, traffic, replicas, slo, remote, Prices())
    ran = [t for t in stream.data if "probe_carried" in t["key"]]
    # one window (the trace spans a minute): a task per fleet searched, none to check
    assert len(ran) == sum(len(o.fleets) for o in there.outcomes) > 10
    # each task carried its own span: the trace itself was never sent to the workers
    from prefixscope.analysis import fanout

    assert not any(f.key.startswith("Trace-") for f in fanout._SCATTERED.values())
    assert fleets_table(here.outcomes, "ideal", here.windows).equals(
        fleets_table(there.outcomes, "ideal", there.windows)
    )
    assert answers_table(here.outcomes, slo, here.held, here.windows).equals(
        answers_table(there.outcomes, slo, there.held, there.windows)
    )
    # an SLO some fleet meets, and not with one replica: the comparison is not vacuous
    assert all(o.best is not None and o.best.probe.replicas > 1 for o in here.outcomes)


def test_the_slo_held_in_every_window_and_each_window_alone_equal_the_search_here(
    cluster,
) -> None:
    from prefixscope.analysis.cost.gpus import GPUS
    from prefixscope.analysis.cost.models import resolve_model
    from prefixscope.analysis.cost.prices import Prices
    from prefixscope.analysis.fleet.run import Traffic
    from prefixscope.analysis.fleet.stepcost import from_roofline
    from prefixscope.analysis.plan.slo import parse_slo
    from prefixscope.analysis.plan.slo_plan import plan_search
    from prefixscope.analysis.plan.slo_settings import PlanSloSettings
    from prefixscope.analysis.plan.slo_tables import answers_table
    from prefixscope.analysis.plan.space import replica_of
    from prefixscope.analysis.trace.csr import build_trace

    # three minutes of conversations, busier in the second: three windows of a minute, each
    # checked (runs of windows: tasks that carry their run's span) and each sized alone
    rng = np.random.default_rng(5)
    n = 360
    turns = rng.integers(1, 6, n)
    requests = [[int(rng.integers(0, 4)), *(90_000 + i * 8 + k for k in range(turns[i]))]
                for i in range(n)]  # fmt: skip
    times = np.sort(np.concatenate([rng.uniform(0, 60, 80), rng.uniform(60, 120, 200),
                                    rng.uniform(120, 180, 80)]))  # fmt: skip
    trace = build_trace(requests, [512 * len(r) for r in requests], ["t"] * n, 512, times)
    traffic = Traffic(rng.integers(1, 200, trace.n_requests))
    shape = resolve_model("llama-3-8b")
    replicas = [replica_of("h100x1", shape, 512, "bf16", from_roofline(shape, GPUS["h100"]))]
    slo = parse_slo("ttft-p95=0.4")
    settings = PlanSloSettings(("h100x1",), slo.text, (20.0,), ("session",), window_s=60.0,
                               per_window=True)  # fmt: skip
    here = plan_search(trace, traffic, replicas, slo, settings, Prices(), per_window=True)
    remote = replace(settings, workers=None, dask_address=cluster.scheduler_address)
    there = plan_search(trace, traffic, replicas, slo, remote, Prices(), per_window=True)
    assert len(here.windows) == 3 and all(h.checked == 3 for h in here.held)
    assert answers_table(here.outcomes, slo, here.held, here.windows).equals(
        answers_table(there.outcomes, slo, there.held, there.windows)
    )
    assert here.sized == there.sized and len(here.sized) > 0

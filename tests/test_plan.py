"""The capacity planner: its smallest LRU capacity against an independent bisection, what it
says beyond the simulated capacities and without a steady state, the value of the next GiB,
the cheapest fleet at given prices, and the page that opens with its answer."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.prices import Prices, load_prices
from prefixscope.analysis.cost.roofline import prefill_cost
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Settings
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.cli import main
from prefixscope.dashboards.tables import PAGE_ROWS
from prefixscope.stages import fleet, plan, report, simulate
from prefixscope.stages.report import ReportSettings
from tests.conftest import Bundled
from tests.test_fleet_page import opened
from tests.test_report import needs_chromium

CAPACITIES = (1_000, 4_000, 16_000, 64_000, 128_000)


def simulated(bundled: Bundled, folder: Path, policies=("ceiling", "lru", "fifo"), caps=CAPACITIES):  # type: ignore[no-untyped-def]
    wh = bundled.copy_to(folder)
    simulate.simulate_policies(
        wh,
        simulate.SimulateSettings(
            policies=tuple(policies),
            capacities=Capacities(blocks=list(caps)),
            measure=Settings(windows=("all", "last-half")),
        ),
    )
    return wh


@pytest.fixture(scope="module")
def planned(bundled_warehouse: Bundled, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    wh = simulated(bundled_warehouse, tmp_path_factory.mktemp("plan"))
    # each replica a deployment at its own pool, and a what-if no H100 holds (never chosen)
    for capacities, deployments in ((Capacities(), ("h100x1", "h100x4", "h200x8")),
                                    (Capacities(blocks=[64_000]), ())):  # fmt: skip
        fleet.simulate_fleets(
            wh,
            fleet.FleetSettings(
                routers=("round-robin", "cache-aware"),
                replicas=(2, 4),
                capacities=capacities,
                deployments=deployments,
                windows=("all", "steady"),
            ),
        )
    # a miss priced by the roofline, whose figures the tests recompute
    return wh, plan.plan_capacity(
        wh, plan.PlanSettings(target=0.9, cost_model="roofline")
    ).to_pylist()


def bisect_lru(trace: Trace, target: float) -> int:
    """The smallest LRU capacity whose token hit rate over the whole trace reaches ``target``
    × the ceiling, by bisection with the simulator (LRU's rate never falls as it grows)."""
    total = trace.input_tokens.sum()
    ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None)).sum() / total

    def rate(c: int) -> float:
        return hit_tokens(trace, POLICIES["lru"].hit_blocks(trace, c)).sum() / total

    low, high = 1, trace.n_unique
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if rate(mid) >= target * ceiling else (mid + 1, high)
    return low


def row(rows: list[dict], kind: str, policy: str | None = None, tenant: str = "*") -> dict:
    return next(
        r
        for r in rows
        if r["kind"] == kind and r["tenant"] == tenant and policy in (None, r["policy"])
    )


@pytest.mark.parametrize("target", [0.5, 0.9])
def test_the_smallest_lru_capacity_is_the_bisections(
    bundled_warehouse, bundled_trace, tmp_path, target
):  # type: ignore[no-untyped-def]
    wh = simulated(bundled_warehouse, tmp_path, policies=("ceiling", "lru"))
    lru = row(
        plan.plan_capacity(wh, plan.PlanSettings(target=target)).to_pylist(), "capacity", "lru"
    )
    expected = bisect_lru(bundled_trace, target)
    assert lru["reached"] and lru["capacity_blocks"] == expected
    assert lru["method"].startswith("exact")
    assert lru["token_hit_rate"] >= lru["target_token_hit_rate"]
    assert lru["bracket_low_blocks"] < expected <= min(c for c in CAPACITIES if c >= expected)
    assert lru["steady"] is True and lru["source_table"] in ("hit_rates", "mrc")


def test_a_target_beyond_the_largest_capacity_is_said_not_extrapolated(
    bundled_warehouse, tmp_path
) -> None:
    wh = simulated(bundled_warehouse, tmp_path, policies=("ceiling", "lru"), caps=(1_000, 4_000))
    lru = row(plan.plan_capacity(wh, plan.PlanSettings(target=0.9)).to_pylist(), "capacity", "lru")
    assert not lru["reached"] and lru["capacity_blocks"] is None
    assert lru["largest_capacity_blocks"] == 4_000
    assert "beyond the largest capacity simulated" in lru["note"]
    with duckdb.connect(str(wh), read_only=True) as con:
        stored = con.execute(
            "SELECT token_hit_rate FROM hit_rates WHERE policy = 'lru' AND capacity_blocks = 4000 "
            "AND tenant = '*' AND measure_window = 'all'"
        ).fetchone()[0]
    assert lru["token_hit_rate"] == stored  # the best simulated, traced to its row


def test_a_cache_the_trace_never_fills_is_no_steady_state(bundled_warehouse, tmp_path) -> None:
    """FIFO is not a stack algorithm: its answer is the smallest stored capacity, here one
    larger than the trace's working set, which no request ever fills."""
    wh = simulated(bundled_warehouse, tmp_path, policies=("ceiling", "fifo"), caps=(400_000,))
    fifo = row(
        plan.plan_capacity(wh, plan.PlanSettings(target=0.9)).to_pylist(), "capacity", "fifo"
    )
    assert fifo["reached"] and fifo["capacity_blocks"] == 400_000
    assert fifo["steady"] is False and "cold-start" in fifo["note"]
    assert "between 0 and 400,000 blocks" in fifo["note"]


def test_the_next_gib_is_priced_from_two_simulations(planned, bundled_trace) -> None:
    _, rows = planned
    lru = row(rows, "capacity", "lru")
    shape, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100")
    gib_blocks = 2**30 // (shape.kv_bytes_per_token() * bundled_trace.block_size)
    inp = bundled_trace.input_tokens.astype(float)

    def saved(c: int) -> float:
        hit = hit_tokens(bundled_trace, POLICIES["lru"].hit_blocks(bundled_trace, c))
        new = np.maximum(inp - hit, 1)
        with_cache = prefill_cost(shape, gpu, new, inp - new).seconds
        return float((prefill_cost(shape, gpu, inp, 0).seconds - with_cache).sum())

    span = bundled_trace.times.max() - bundled_trace.times.min()
    c = lru["capacity_blocks"]
    expected = (saved(c + gib_blocks) - saved(c)) * 3600 / span
    assert lru["marginal_gpu_seconds_per_hour_per_gib"] == pytest.approx(expected, rel=1e-9)
    assert expected > 0


def test_the_cheapest_fleet_that_reaches_the_target_is_chosen(planned) -> None:
    wh, rows = planned
    chosen = row(rows, "configuration")
    with duckdb.connect(str(wh), read_only=True) as con:
        candidates = con.execute(
            "SELECT router, replicas, capacity_blocks, token_hit_rate, ceiling_token_hit_rate, "
            "coalesce(gpus, 1), gpu, exceeds_hbm FROM fleet_hit_rates "
            "WHERE tenant = '*' AND measure_window = 'all'"
        ).fetchall()
    prices = Prices()
    assert any(c[7] for c in candidates), "the grid must hold a fleet that cannot exist"
    reaching = [c for c in candidates if c[3] >= 0.9 * c[4] and not c[7]]
    assert reaching, "the grid must hold a configuration that reaches the target"

    def cost(c: tuple) -> float:  # replicas × GPUs each × the GPU's catalog price
        return c[1] * c[5] * prices.gpu_price(c[6])

    cheapest = min(cost(r) for r in reaching)
    assert chosen["reached"] and chosen["cost_per_hour"] == pytest.approx(cheapest)
    assert (chosen["router"], chosen["replicas"], chosen["capacity_blocks"]) in [
        r[:3] for r in reaching if cost(r) == cheapest
    ]
    assert chosen["source_table"] == "fleet_hit_rates" and chosen["steady"] is not None


def test_prices_come_from_a_toml_file_and_a_typo_is_an_error(tmp_path) -> None:
    good = tmp_path / "prices.toml"
    good.write_text("gpu_hour = 4.0\nstore_gb_hour = 0.0\n")
    assert load_prices(good) == Prices(gpu_hour=4.0, dram_gb_hour=0.005, store_gb_hour=0.0)
    typo = tmp_path / "typo.toml"
    typo.write_text("gpu_hours = 4.0\n")
    with pytest.raises(ValueError, match="unknown price 'gpu_hours'"):
        load_prices(typo)
    negative = tmp_path / "negative.toml"
    negative.write_text("gpu_hour = -1\n")
    with pytest.raises(ValueError, match="gpu_hour"):
        load_prices(negative)


def test_plan_without_a_simulation_says_what_to_run(bundled_warehouse, tmp_path, capsys) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    assert main(["plan", "--warehouse", str(wh)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "prefixscope simulate" in err


def test_the_command_prints_the_answer_first(planned, tmp_path, capsys) -> None:
    wh, _ = planned
    assert main(["plan", "--warehouse", str(wh), "--target", "0.8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("To keep 80% of the ceiling")
    assert "The cheapest simulated fleet that reaches it" in " ".join(out.split())


@pytest.mark.browser
@needs_chromium
def test_the_page_opens_with_the_answer(planned, tmp_path, browser) -> None:
    wh, _ = planned
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "report.html")))
    with duckdb.connect(str(wh), read_only=True) as con:  # the newest plan (other tests replan)
        rows = con.sql("SELECT * FROM latest_plan").to_arrow_table().to_pylist()
    lru = row(rows, "capacity", "lru")
    with opened(page, "#plan", browser) as (tab, errors, dialogs):
        first = tab.locator("h2").first.inner_text()
        tab.locator("#plan-details summary").click()  # the table is set up when shown
        tab.wait_for_selector("table#plan-table.dataTable")
        answer = tab.locator("#plan .answer").inner_text()
        cells = tab.locator("#plan-table tr").count()
    assert first == "The answer"
    assert f"{lru['capacity_blocks']:,} blocks" in answer and "cheapest simulated fleet" in answer
    assert cells == 1 + min(len(rows), PAGE_ROWS)  # a header, and the first page of rows
    assert errors == [] and dialogs == []


def test_a_fleet_of_another_model_is_sized_by_its_own_kv(bundled_warehouse, tmp_path) -> None:  # noqa: ANN001
    """``plan`` (its ``--model`` llama-3-8b by default) beside fleets run on deepseek-v3: the
    configuration row names the fleet's model and its KV in GiB at that model's size, and the
    prose names a policy other than lru; ``--engine`` without ``--slo`` is refused, not
    ignored."""
    wh = str(bundled_warehouse.copy_to(tmp_path))
    assert main(["simulate", "--warehouse", wh, "--policy", "ceiling,lru",
                 "--capacity-blocks", "400,1600"]) == 0  # fmt: skip
    assert main(["fleet", "--warehouse", wh, "--replicas", "2", "--router", "session",
                 "--deployment", "h200x8", "--model", "deepseek-v3",
                 "--policy", "lfu"]) == 0  # fmt: skip
    assert main(["plan", "--warehouse", wh]) == 0
    with duckdb.connect(wh, read_only=True) as con:
        model, blocks, gib, policy = con.execute(
            "SELECT model, capacity_blocks, capacity_gib, policy FROM latest_plan "
            "WHERE kind = 'configuration' AND tenant = '*'"
        ).fetchone()
    per_token = resolve_model("deepseek-v3").kv_bytes_per_token("bf16")
    assert model == "deepseek-v3" and policy == "lfu"
    assert gib == pytest.approx(blocks * 512 * per_token / 2**30)
    assert main(["plan", "--warehouse", wh, "--engine", "vllm"]) == 2

"""The KV-pool engines (vllm, sglang): what the pool must hold, what it refuses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.hardware import Hardware, check_pools_fit
from prefixscope.analysis.fleet.pool_inputs import repeats
from prefixscope.analysis.fleet.run import Fleet, Tiers, Traffic, simulate_fleet
from prefixscope.analysis.trace.csr import build_trace
from tests.test_fleet import ENGINE, sessions_trace
from tests.test_fleet_deployment import fleet, rows, small  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def busy() -> tuple:  # type: ignore[type-arg]
    """Conversations of long outputs arriving fast: pools of a few dozen blocks fill."""
    trace, traffic = sessions_trace(n_sessions=40, turns=4, seed=5, gap_s=0.02)
    return trace, Traffic(traffic.output_tokens * 8 + 40, traffic.sessions)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("capacity", [40, 80, 4_000])
def test_a_pool_never_holds_more_than_its_capacity(busy: tuple, engine: str, capacity: int) -> None:  # type: ignore[type-arg]
    trace, traffic = busy
    out = simulate_fleet(trace, traffic, Fleet("round-robin", 2, capacity, engine=engine), ENGINE)
    assert (out.running_blocks_p95 <= capacity).all()
    assert (out.running_blocks_mean + out.prefix_cache_blocks_mean <= capacity + 1e-9).all()
    assert (out.ttft > 0).all() and (out.done_at >= out.first_start).all()
    if capacity == 4_000:  # room for everything: nobody is preempted
        assert out.preemptions.sum() == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_tight_pool_preempts_and_a_larger_one_caches_more(busy: tuple, engine: str) -> None:  # type: ignore[type-arg]
    trace, traffic = busy
    tight, roomy = (
        simulate_fleet(trace, traffic, Fleet("round-robin", 2, c, engine=engine), ENGINE)
        for c in (40, 4_000)
    )
    assert tight.preemptions.sum() > 0
    assert roomy.prefix_cache_blocks_mean.sum() > tight.prefix_cache_blocks_mean.sum()
    assert roomy.hit_tokens.sum() >= tight.hit_tokens.sum()


def test_the_ideal_engine_takes_nothing_from_its_cache(busy: tuple) -> None:  # type: ignore[type-arg]
    trace, traffic = busy
    ideal = simulate_fleet(trace, traffic, Fleet("round-robin", 2, 40), ENGINE)
    assert ideal.preemptions.sum() == 0
    assert (ideal.running_blocks_p95 > 40).any()  # its running requests need more than 40


@pytest.mark.parametrize(
    ("fleet", "message"),
    [
        (Fleet("round-robin", 2, 3, engine="vllm"), "does not fit a KV pool"),
        (Fleet("round-robin", 2, 400, engine="vllm", policy="fifo"), "its own rule"),
        (Fleet("round-robin", 2, 400, engine="sglang", tiers=Tiers(store_blocks=5)), "HiCache"),
        (Fleet("round-robin", 2, 400, engine="tgi"), "unknown engine"),
        (Fleet("kv-aware", 2, 400, policy="belady"), "which a stateful router"),
    ],
)
def test_a_bad_engine_configuration_says_what_is_wrong(
    busy: tuple,  # type: ignore[type-arg]
    fleet: Fleet,
    message: str,
) -> None:
    trace, traffic = busy
    with pytest.raises(ValueError, match=message):
        simulate_fleet(trace, traffic, fleet, ENGINE)


def test_a_pool_beyond_the_deployment_is_refused_only_for_a_pool_engine() -> None:
    h = Hardware(deployment="h100x1", gpu="h100", gpus=1, kv_pool_blocks=885, judged_blocks=885)
    over = Fleet("round-robin", 2, 5_000)
    check_pools_fit([(over, h)])  # ideal: a what-if, its rows say exceeds_hbm
    with pytest.raises(ValueError, match="exceed h100x1's pool of 885"):
        check_pools_fit([(replace(over, engine="vllm"), h)])
    check_pools_fit([(replace(over, engine="vllm", capacity_blocks=885), h)])


def test_the_cli_refuses_a_pool_beyond_hbm_and_writes_nothing(small: Path, capsys) -> None:  # noqa: ANN001, F811
    before = rows(small, "SELECT count(*) FROM runs")
    flags = ["--deployment", "h100x1", "--capacity-blocks", "5000", "--engine", "vllm"]
    assert fleet(small, *flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "exceed h100x1's pool" in err, err
    assert rows(small, "SELECT count(*) FROM runs") == before


def test_rows_carry_each_engine(small: Path) -> None:  # noqa: F811
    assert fleet(small, "--deployment", "h100x1", "--engine", "ideal,vllm,sglang") == 0
    got = rows(
        small,
        "SELECT engine, count(*) FROM latest_fleet_replicas GROUP BY engine ORDER BY engine",
    )
    assert got == [("ideal", 2), ("sglang", 2), ("vllm", 2)]
    pooled = rows(
        small,
        "SELECT bool_and(running_blocks_p95 <= kv_pool_blocks) FROM latest_fleet_hit_rates "
        "WHERE engine <> 'ideal'",
    )
    assert pooled == [(True,)]  # its conversations name block 1 twice: held once


def test_on_the_bundled_hour_a_saturated_vllm_pool_hits_less_not_more(
    bundled_warehouse,  # noqa: ANN001
    bundled_trace,  # noqa: ANN001
) -> None:
    """Four replicas of llama-3-8b on one H100 each (885 blocks): under load the running
    requests take the pool from the cache, so vLLM's own metric (each request's first
    admission) falls from 1× to 8×, below the ideal cache's (which keeps partial blocks, so at
    light load vLLM, which never caches one, may hit a little more)."""
    from prefixscope import warehouse
    from prefixscope.analysis.fleet.traffic import load_traffic

    with warehouse.connect(bundled_warehouse.path, read_only=True) as con:
        traffic = load_traffic(con)
    total = bundled_trace.input_tokens.sum()
    rate = {
        (engine, load): simulate_fleet(
            bundled_trace, traffic, Fleet("session", 4, 885, load_scale=load, engine=engine), ENGINE
        ).hit_tokens.sum()
        / total
        for engine, load in [("ideal", 1.0), ("vllm", 1.0), ("vllm", 8.0)]
    }
    assert rate["vllm", 8.0] < rate["vllm", 1.0]
    assert rate["vllm", 8.0] <= rate["ideal", 1.0]


@pytest.mark.parametrize(
    ("engine", "router", "tiers"),
    [
        ("vllm", "kv-aware", Tiers(dram_blocks=30, store_blocks=200)),
        ("vllm", "cache-aware", Tiers()),
        ("sglang", "kv-aware", Tiers(dram_blocks=30, store_blocks=200)),
        ("ideal", "cache-aware", Tiers(dram_blocks=30)),
    ],
)
def test_node_arrays_kept_from_another_run_change_nothing(
    busy: tuple,  # type: ignore[type-arg]
    engine: str,
    router: str,
    tiers: Tiers,
) -> None:
    """The SLO search keeps its node arrays between fleets (``_records.kept_nodes``): whatever
    a kept array holds when a run starts (here another fleet's leftovers, then noise), the run
    is the one on fresh arrays. A pool that read a count before setting it would differ."""
    from prefixscope.analysis.fleet import _records

    trace, traffic = busy
    fleet = Fleet(router, 3, 60, engine=engine, tiers=tiers)
    fresh = simulate_fleet(trace, traffic, fleet, ENGINE)
    with _records.kept_nodes():
        other = replace(fleet, replicas=4, capacity_blocks=50, load_scale=4.0)
        simulate_fleet(trace, traffic, other, ENGINE)
        kept = _records.kept_arrays()
        assert kept  # the arrays this run reuses
        rng = np.random.default_rng(0)
        for array in kept.values():
            array[:] = rng.integers(0, min(array.size, 100), array.size, dtype=array.dtype)
        again = simulate_fleet(trace, traffic, fleet, ENGINE)
    for name in ("replica", "hit_tokens", "ttft", "done_at", "source_tokens", "preemptions"):
        assert np.array_equal(getattr(again, name), getattr(fresh, name)), name


def test_runs_on_two_threads_at_once_keep_arrays_apart(busy: tuple) -> None:  # type: ignore[type-arg]
    """A Dask worker runs tasks on several threads, and the loop releases the GIL: each
    thread keeps its own node arrays (``_records.kept_nodes``), so two fleets simulated at
    once, each on a thread that keeps its arrays, give what each gives alone."""
    from concurrent.futures import ThreadPoolExecutor

    from prefixscope.analysis.fleet import _records

    trace, traffic = busy
    fleets = [
        Fleet("kv-aware", 3, 60, engine="vllm", tiers=Tiers(dram_blocks=30)),
        Fleet("cache-aware", 4, 50, engine="vllm", load_scale=4.0),
    ]
    alone = [simulate_fleet(trace, traffic, f, ENGINE) for f in fleets]

    def kept_run(fleet: Fleet):  # type: ignore[no-untyped-def]
        with _records.kept_nodes(persist=True):
            return [simulate_fleet(trace, traffic, fleet, ENGINE) for _ in range(3)]

    try:
        with ThreadPoolExecutor(2) as pool:
            together = list(pool.map(kept_run, fleets))
    finally:
        _records.release_kept()
    for one, runs in zip(alone, together, strict=True):
        for run in runs:
            assert np.array_equal(run.ttft, one.ttft) and np.array_equal(run.replica, one.replica)


@settings(max_examples=80, deadline=None)
@given(requests=st.lists(st.lists(st.integers(0, 9), max_size=8), min_size=1, max_size=20))
def test_a_lookup_repeats_exactly_when_its_request_named_the_block_before(requests) -> None:  # type: ignore[no-untyped-def]
    """The pools hold a block once per request: ``repeats`` marks each later naming of a block
    within its own request (a trace may name one twice), whatever other requests did."""
    trace = build_trace(requests, [4 * len(r) for r in requests], ["t"] * len(requests), 4)
    got = repeats(trace)
    expected = [
        trace.blocks[p] in trace.blocks[trace.offsets[q] : p]
        for q in range(trace.n_requests)
        for p in range(trace.offsets[q], trace.offsets[q + 1])
    ]
    assert got.dtype == np.bool_ and got.tolist() == expected

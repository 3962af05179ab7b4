"""A fleet with prefix caching off (``Fleet.prefix_caching`` False, vLLM's
``--no-enable-prefix-caching``): no request hits, routers see the prompts as they are, and a
KV pool is only its count of free blocks (``fleet/_pool.py``). The plain-Python pool checks it
request by request (``tests/test_fleet_pool_reference.py`` draws it); here, what it must
equal and what it must not keep."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefixscope.analysis.fleet import _records
from prefixscope.analysis.fleet.run import Fleet, Tiers, Traffic, simulate_fleet
from prefixscope.analysis.plan.nocache import without_prefix_cache
from tests.test_fleet import ENGINE, sessions_trace

SAME = ("replica", "ttft", "first_start", "done_at", "steps", "prefill_tokens", "decode_tokens")


@pytest.fixture(scope="module")
def busy() -> tuple:  # type: ignore[type-arg]
    """Conversations of long outputs arriving fast: pools of a few dozen blocks fill."""
    trace, traffic = sessions_trace(n_sessions=40, turns=4, seed=5, gap_s=0.02)
    return trace, Traffic(traffic.output_tokens * 8 + 40, traffic.sessions)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("router", ["round-robin", "session", "cache-aware", "kv-aware"])
def test_with_room_for_all_it_is_the_pool_on_a_trace_whose_blocks_never_repeat(
    busy: tuple,  # type: ignore[type-arg]
    engine: str,
    router: str,
) -> None:
    """Where no request is preempted, a pool with caching off runs as the same pool caching a
    trace whose every lookup is a block of its own (``plan/nocache.py``): nothing can hit
    either way, and the routers send every request to the same replica. What differs is what
    the pool keeps: nothing once a request is done."""
    trace, traffic = busy
    fleet = Fleet(router, 3, 4_000, engine=engine)
    off = simulate_fleet(trace, traffic, replace(fleet, prefix_caching=False), ENGINE)
    fresh = simulate_fleet(without_prefix_cache(trace), traffic, fleet, ENGINE)
    assert off.preemptions.sum() == fresh.preemptions.sum() == 0
    for name in SAME:
        assert np.array_equal(getattr(off, name), getattr(fresh, name)), name
    assert off.hit_tokens.sum() == 0
    assert off.prefix_cache_blocks_mean.sum() == 0 < fresh.prefix_cache_blocks_mean.sum()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_preempted_request_recomputes_all_it_had(busy: tuple, engine: str) -> None:  # type: ignore[type-arg]
    """With nothing cached, a request preempted and admitted again finds none of its blocks:
    its lookups after a preemption hit nothing, where the caching pool on the same fresh
    trace still finds its own prompt's blocks, freed but not yet reused."""
    trace, traffic = busy
    fleet = Fleet("round-robin", 2, 40, engine=engine)
    off = simulate_fleet(trace, traffic, replace(fleet, prefix_caching=False), ENGINE)
    fresh = simulate_fleet(without_prefix_cache(trace), traffic, fleet, ENGINE)
    assert off.preemptions.sum() > 0
    assert off.preempted[:, 1].sum() > 0 and off.preempted[:, 2].sum() == 0
    assert fresh.preempted[:, 2].sum() > 0
    assert off.hit_tokens.sum() == 0


def test_the_ideal_engine_hits_nothing_and_routes_as_before(busy: tuple) -> None:  # type: ignore[type-arg]
    trace, traffic = busy
    fleet = Fleet("cache-aware", 3, 60)
    off = simulate_fleet(trace, traffic, replace(fleet, prefix_caching=False), ENGINE)
    fresh = simulate_fleet(without_prefix_cache(trace), traffic, fleet, ENGINE)
    on = simulate_fleet(trace, traffic, fleet, ENGINE)
    assert off.hit_tokens.sum() == 0 < on.hit_tokens.sum()
    for name in SAME:
        assert np.array_equal(getattr(off, name), getattr(fresh, name)), name


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_pool_with_caching_off_keeps_no_array_per_block(busy: tuple, engine: str) -> None:  # type: ignore[type-arg]
    """The arrays a pool keeps per block and replica (its counts, its free queue's links) are
    not made at all: what a run holds no longer grows with the trace's blocks × replicas."""
    trace, traffic = busy
    fleet = Fleet("round-robin", 4, 4_000, engine=engine)
    sizes = {}
    for caching in (True, False):
        with _records.kept_nodes():
            simulate_fleet(trace, traffic, replace(fleet, prefix_caching=caching), ENGINE)
            sizes[caching] = max((a.size for a in _records.kept_arrays().values()), default=0)
    assert sizes[True] >= 4 * trace.n_unique
    assert sizes[False] <= 1


@pytest.mark.parametrize(
    "tiers", [Tiers(dram_blocks=30), Tiers(store_blocks=200), Tiers(dram_blocks=5, store_blocks=9)]
)
def test_a_tier_with_caching_off_is_refused(busy: tuple, tiers: Tiers) -> None:  # type: ignore[type-arg]
    trace, traffic = busy
    fleet = Fleet("round-robin", 2, 400, engine="vllm", tiers=tiers, prefix_caching=False)
    with pytest.raises(ValueError, match="caching off"):
        simulate_fleet(trace, traffic, fleet, ENGINE)

"""The compiled KV pools (vllm, sglang) against their plain-Python reference, request by
request, on small random traces whose pools fill, so blocks are evicted and requests
preempted, with the DRAM tiers and stores the cases draw."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.fleet.run import Traffic, simulate_fleet
from tests.oracles.fleet_pool import reference_pool_fleet
from tests.test_fleet_reference import FIELDS, agree, cases, first_difference


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("router", list(ROUTERS))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_the_pool_matches_its_reference_request_by_request(
    router: str, engine: str, data: st.DataObject
) -> None:
    case = data.draw(cases(router, "lru"))
    trace = case.trace
    output = case.traffic.output_tokens * data.draw(st.sampled_from([1, 4]))
    longest = trace.input_tokens + np.maximum(output, 1) - 1
    need = int(np.maximum(trace.blocks_per_request, -(-longest // trace.block_size)).max())
    capacity = need + data.draw(st.sampled_from([0, 1, 3, 10, 40]))
    # inclusive tiers: a DRAM tier past the pool's size holds its victims
    dram = data.draw(st.sampled_from([0, 3, capacity, 2 * capacity + 5]))
    tiers = replace(case.fleet.tiers, dram_blocks=dram)
    if engine == "sglang" and not dram:  # HiCache writes its store from host memory
        tiers = replace(tiers, store_blocks=None)
    caching = data.draw(st.sampled_from([True, True, True, False]))
    if not caching:  # no tier: they hold cached blocks
        tiers = replace(tiers, dram_blocks=0, store_blocks=None)
    fleet = replace(
        case.fleet, engine=engine, tiers=tiers, capacity_blocks=capacity, prefix_caching=caching
    )
    traffic = Traffic(output, case.traffic.sessions)
    got = simulate_fleet(trace, traffic, fleet, case.engine)
    want = reference_pool_fleet(trace, traffic, fleet, case.engine)
    for name in FIELDS:
        g, w = getattr(got, name), getattr(want, name)
        assert g.shape == w.shape and agree(g, w).all(), f"{name} {first_difference(g, w)}"
    assert (got.source_tokens.sum(axis=1) == got.hit_tokens).all()  # by tier, they add up


def test_a_freed_hashless_block_is_the_next_taken_as_vllm_reuses_it() -> None:
    """vLLM's ``free_blocks`` puts blocks without a hash at the head of the free queue ("LIFO
    reuse"), cached ones at its tail deepest first: after a request of blocks 1, 2 and a
    hashless tail frees them, the next allocation takes the hashless one and evicts nothing,
    the one after evicts block 2."""
    from tests.oracles.fleet_pool import _PoolReplica

    rep = _PoolReplica(capacity=3, sglang=False)
    rep.cache = {1: 1, 2: 1}  # held by the running request, with its hashless block
    rep.release([1, 2], [None])
    assert list(rep.free_queue) == [("anon", 1), ("hash", 2), ("hash", 1)]
    parent = np.array([-1, -1, 1])
    rep.take(0, parent)
    assert set(rep.cache) == {1, 2}
    rep.take(1, parent)
    assert set(rep.cache) == {1} and rep.filled_at == 1

"""A request's answer comes back in its next turn: which blocks hold it (``structure/answers.py``),
and the KV pools (vllm, sglang) caching it under those ids, so the next turn hits them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.run import Fleet, Traffic, simulate_fleet, simulate_replica
from prefixscope.analysis.structure.answers import (
    NONE,
    answer_blocks,
    answer_ids,
    routed_answer_blocks,
)
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.isolation import subset
from tests.oracles.fleet_pool import reference_pool_fleet
from tests.test_fleet import ENGINE, sessions_trace

BS = 16


# turn 1: blocks [1, 2, 3] of 40 tokens (2 full, one partial); turn 2 re-sends them with the
# answer and a message: [1, 2, 10, 11, 12, 13] of 90 tokens
@pytest.mark.parametrize(
    ("first_out", "second", "second_tokens", "want"),
    [
        # 40 + 30 - 1 = 69 computed tokens: 4 full blocks, 2 of them past the prompt's
        (30, [1, 2, 10, 11, 12, 13], 90, 2),
        # a long answer: capped at the next turn's full blocks (90 tokens: 5)
        (400, [1, 2, 10, 11, 12, 13], 90, 3),
        # an answer inside the partial block: no full block past the prompt
        (8, [1, 2, 10, 11, 12, 13], 90, 0),
        # no output logged: nothing generated
        (0, [1, 2, 10, 11, 12, 13], 90, 0),
        # the second request does not repeat the first's full blocks: not its next turn
        (30, [1, 9, 10, 11, 12, 13], 90, 0),
        # not longer than the first: a re-sent prompt, not a next turn (structure/turns.py)
        (30, [1, 2, 3], 40, 0),
    ],
)
def test_the_next_turn_names_the_answers_full_blocks(
    first_out: int, second: list[int], second_tokens: int, want: int
) -> None:
    trace = build_trace([[1, 2, 3], second], [40, second_tokens], ["t", "t"], BS)
    got = answer_blocks(trace, np.array([first_out, 5]))
    assert int(got.count[0]) == want
    assert got.child[0] == (1 if want else NONE) and got.count[1] == 0
    offsets, ids = answer_ids(trace, got)
    assert offsets.tolist() == [0, want, want]
    assert ids.tolist() == [trace.blocks[trace.offsets[1] + 2 + k] for k in range(want)]


def test_another_tenants_request_is_never_the_next_turn() -> None:
    trace = build_trace([[1, 2], [1, 2, 10, 11]], [32, 64], ["a", "b"], BS)
    assert answer_blocks(trace, np.array([40, 0])).count.tolist() == [0, 0]


def two_turns(gap_s: float) -> tuple:
    """Turn 1 (2 full blocks, a 30-token answer), turn 2 ``gap_s`` later re-sending it: the
    answer's block 2 and 3 are the second turn's."""
    trace = build_trace(
        [[1, 2, 3], [1, 2, 10, 11, 12, 13]], [40, 90], ["t", "t"], BS, times=[0.0, gap_s]
    )
    return trace, Traffic(np.array([30, 5], np.int64))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("cache_answers", [True, False])
def test_the_next_turn_hits_the_answer_once_it_is_cached(engine: str, cache_answers: bool) -> None:
    trace, traffic = two_turns(gap_s=100.0)
    fleet = Fleet("round-robin", 1, 64, engine=engine)
    settings = replace(ENGINE, cache_answers=cache_answers)
    got = simulate_fleet(trace, traffic, fleet, settings)
    # the prompt's 2 full blocks, then the answer's 2 when cached; the partial block never
    assert got.hit_blocks.tolist() == [0, 4 if cache_answers else 2]
    want = reference_pool_fleet(trace, traffic, fleet, settings)
    assert want.hit_blocks.tolist() == got.hit_blocks.tolist()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_next_turn_that_comes_while_the_answer_runs_computes_it(engine: str) -> None:
    trace, traffic = two_turns(gap_s=1e-9)
    got = simulate_fleet(trace, traffic, Fleet("round-robin", 1, 64, engine=engine), ENGINE)
    assert got.hit_blocks.tolist() == [0, 2]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(("capacity", "load"), [(32, 1.0), (60, 1.0), (300, 1.0), (60, 30.0)])
def test_pools_that_cache_answers_match_their_reference_on_conversations(
    engine: str, capacity: int, load: float
) -> None:
    """At 30× load next turns come while their answers run: vllm's second copies."""
    trace, traffic = sessions_trace(n_sessions=30, turns=6, seed=3)
    traffic = Traffic(traffic.output_tokens * 3, traffic.sessions)
    assert answer_blocks(trace, traffic.output_tokens).n_blocks > 20  # answers to cache
    fleet = Fleet("session", 3, capacity, load_scale=load, engine=engine)
    got = simulate_fleet(trace, traffic, fleet, ENGINE)
    want = reference_pool_fleet(trace, traffic, fleet, ENGINE)
    np.testing.assert_array_equal(got.hit_blocks, want.hit_blocks)
    np.testing.assert_array_equal(got.replica, want.replica)
    np.testing.assert_allclose(got.ttft, want.ttft, rtol=1e-9)
    assert (got.preemptions == want.preemptions).all()
    never = simulate_fleet(trace, traffic, fleet, replace(ENGINE, cache_answers=False))
    assert got.hit_blocks.sum() > never.hit_blocks.sum()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n_rep=st.integers(2, 5), shared=st.booleans())
def test_routed_answers_are_each_replicas_stream_alone(seed: int, n_rep: int, shared: bool) -> None:
    """Per replica, the answers of its requests alone, each replica's subset numbered in the
    order of the trace's ids (a sort, as ``subset`` numbers by default), where the routed
    answers number every replica's subset by first lookup through one table."""
    trace, traffic = sessions_trace(n_sessions=12, turns=4, seed=seed, shared_first=shared)
    out = traffic.output_tokens * (1 + seed % 3)
    routing = np.random.default_rng(seed).integers(0, n_rep, trace.n_requests)
    found = routed_answer_blocks(trace, out, routing)
    for i in range(n_rep):
        mine = np.flatnonzero(routing == i)
        alone = answer_blocks(subset(trace, mine), out[mine])
        has = alone.child != NONE
        np.testing.assert_array_equal(found.count[mine], alone.count)
        np.testing.assert_array_equal(found.first[mine], alone.first)
        np.testing.assert_array_equal(found.child[mine[has]], mine[alone.child[has]])
        assert (found.child[mine[~has]] == NONE).all()


def test_a_subset_numbered_by_first_lookup_is_the_same_requests_and_leaves_its_table() -> None:
    trace, _ = sessions_trace(n_sessions=12, turns=4, seed=3, shared_first=True)
    mine = np.flatnonzero(np.arange(trace.n_requests) % 3 != 1)
    slot = np.zeros(trace.n_unique, np.int32)
    by_id, by_lookup = subset(trace, mine), subset(trace, mine, slot)
    assert (slot == 0).all()
    assert by_lookup.n_unique == by_id.n_unique < trace.n_unique
    np.testing.assert_array_equal(by_lookup.offsets, by_id.offsets)
    # the same block at every lookup, under other ids: first looked up, first numbered
    np.testing.assert_array_equal(by_lookup.hashes[by_lookup.blocks], by_id.hashes[by_id.blocks])
    first = np.unique(by_lookup.blocks, return_index=True)[1]
    assert (np.diff(first) > 0).all()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_replica_run_alone_caches_the_answers_it_caches_in_the_fleet(engine: str) -> None:
    trace, traffic = sessions_trace(n_sessions=40, turns=5, seed=5)
    traffic = Traffic(traffic.output_tokens * 3, traffic.sessions)
    fleet = Fleet("round-robin", 3, 60, engine=engine)
    whole = simulate_fleet(trace, traffic, fleet, ENGINE)
    routing = np.arange(trace.n_requests) % 3
    found = routed_answer_blocks(trace, traffic.output_tokens, routing)
    # round-robin splits conversations: an answer is cached where its next turn also runs
    has = found.child != NONE
    assert (routing[found.child[has]] == routing[has]).all() and has.any()
    for i in range(3):
        mine = np.flatnonzero(routing == i)
        alone = simulate_replica(trace, traffic, fleet, ENGINE, mine)
        np.testing.assert_array_equal(whole.hit_blocks[mine], alone.hit_blocks)
        np.testing.assert_allclose(whole.ttft[mine], alone.ttft, rtol=1e-12)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_next_turn_during_the_answer_hits_what_vllm_has_hashed_so_far(engine: str) -> None:
    """vLLM hashes generated blocks as they fill; SGLang inserts the answer when it ends. A
    next turn that comes half-way through a 6-block answer hits some of it under vllm, none
    under sglang."""
    prompts, tokens = [[1, 2, 3], [1, 2, *range(10, 20)]], [40, 200]
    traffic = Traffic(np.array([100, 5], np.int64))
    fleet = Fleet("round-robin", 1, 64, engine=engine)
    alone = build_trace(prompts[:1], tokens[:1], ["t"], BS)
    first = simulate_fleet(alone, Traffic(traffic.output_tokens[:1]), fleet, ENGINE)
    half = float(first.arrival[0] + first.ttft[0] + first.done_at[0]) / 2
    trace = build_trace(prompts, tokens, ["t", "t"], BS, times=[0.0, half])
    assert answer_blocks(trace, traffic.output_tokens).count.tolist() == [6, 0]
    got = simulate_fleet(trace, traffic, fleet, ENGINE)
    hit = int(got.hit_blocks[1])
    assert (2 < hit < 8) if engine == "vllm" else hit == 2
    want = reference_pool_fleet(trace, traffic, fleet, ENGINE)
    assert want.hit_blocks.tolist() == got.hit_blocks.tolist()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(("capacity", "load"), [(32, 1.0), (32, 8.0), (40, 16.0)])
def test_every_preemption_is_one_lookup_counted_apart(
    engine: str, capacity: int, load: float
) -> None:
    """vLLM's metric keeps a preempted request's later lookups in ``preempted_*`` counters, not
    in its hit rate: each preemption is followed by one such lookup (every request finishes),
    which finds at most what it looks up, and the columns carry them per tenant."""
    from prefixscope.analysis.fleet.tables import Pricing, hit_rate_rows

    trace, traffic = sessions_trace(n_sessions=30, turns=6, seed=3)
    traffic = Traffic(traffic.output_tokens * 3, traffic.sessions)
    fleet = Fleet("session", 3, capacity, load_scale=load, engine=engine)
    out = simulate_fleet(trace, traffic, fleet, ENGINE)
    lookups, queried, found = out.preempted.sum(axis=0)
    assert lookups == out.preemptions.sum() > 0
    assert 0 <= found <= queried and (out.preempted[:, 2] <= out.preempted[:, 1]).all()
    ceiling = np.zeros(trace.n_requests, np.int64)
    pricing = Pricing("llama-3-8b", "h100", "roofline")
    rows = hit_rate_rows(trace, out, ceiling, ["all"], 0, pricing)
    rows = [r for r in rows if r["tenant"] == "*"]
    assert [rows[0][k] for k in ("preempted_lookups", "preempted_query_tokens")] == [
        lookups,
        queried,
    ]


@pytest.mark.parametrize(("other_blocks", "want"), [(16, 8), (18, 6), (20, 4)])
def test_an_answer_computed_twice_is_cached_twice_under_vllm(other_blocks: int, want: int) -> None:
    """Turn 2 comes at once and computes turn 1's answer (ids 10-15) before turn 1's decode
    fills the same blocks: vLLM caches both copies (it never de-duplicates). Turn 2's copies
    are freed first; a request of ``other_blocks`` new blocks then evicts them, and turn 3
    still hits the answer on turn 1's copies, as far as they survive. ``want``: turn 3's hit
    blocks as vLLM 0.34.0's own scheduler gives them on this trace at 512-token blocks
    (``benchmarks/vllm_driver.py``); keeping one copy per id, the pool hit 2 in each case."""
    turn = [1, 2, *range(10, 18)]
    prompts = [[1, 2, 3], turn, list(range(100, 100 + other_blocks)), turn]
    tokens = [40, 160, other_blocks * BS, 160]
    trace = build_trace(prompts, tokens, ["t"] * 4, BS, times=[0.0, 1e-9, 50.0, 100.0])
    traffic = Traffic(np.array([100, 5, 1, 1], np.int64))
    assert answer_blocks(trace, traffic.output_tokens).count.tolist() == [6, 0, 0, 0]
    fleet = Fleet("round-robin", 1, 24, engine="vllm")
    got = simulate_fleet(trace, traffic, fleet, ENGINE)
    assert got.hit_blocks.tolist() == [0, 2, 0, want]
    want_ref = reference_pool_fleet(trace, traffic, fleet, ENGINE).hit_blocks
    assert want_ref.tolist() == [0, 2, 0, want]

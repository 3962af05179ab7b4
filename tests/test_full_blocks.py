"""Blocks as vLLM counts them (``trace/full_blocks.py``): a hash-id trace's partial last block is
never cached, and a prompt's last token is always computed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only

BS = 4


@pytest.mark.parametrize(
    ("hashes", "tokens", "rule", "kept", "recomputed"),
    [
        ([11, 12], 8, None, [11, 12], True),  # whole blocks: all kept, the last recomputed
        ([11, 12], 7, None, [11], False),  # a partial last block: left out
        ([11], 1, None, [], False),  # one token: nothing a later request can hit
        ([], 0, None, [], False),
        ([11, 12], 9, [True], [11, 12], False),  # a token source names full blocks only
        ([11, 12], 7, [True], [11], False),  # a row naming a block its tokens never fill
        ([11, 12], 8, [True], [11, 12], True),
    ],
)
def test_a_request_keeps_its_full_blocks_and_computes_its_last_token(
    hashes: list[int], tokens: int, rule, kept: list[int], recomputed: bool
) -> None:
    trace = build_trace([hashes], [tokens], ["t"], BS, last_token_rule=rule)
    view = full_blocks_only(trace)
    got = view.hashes[view.blocks[view.offsets[0] : view.offsets[1]]].tolist()
    assert got == kept
    assert bool(view.recomputes_last_block[0]) is recomputed


def test_a_trace_that_follows_both_rules_is_left_as_it_is() -> None:
    trace = build_trace([[1, 2], [1]], [9, 5], ["t", "t"], BS, last_token_rule=[True, True])
    assert full_blocks_only(trace) is trace


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, BS - 1), st.integers(0, 3)),
        min_size=1,
        max_size=12,
    )
)
def test_every_request_loses_exactly_its_partial_block(rows) -> None:  # type: ignore[no-untyped-def]
    """Random hash-id requests (blocks drawn from a few chains, a partial tail or not): each
    keeps its hashes in order, less the last where its prompt is not whole blocks; the ids are
    dense and the tokens unchanged."""
    chains = [[100 * c + d for d in range(1, 6)] for c in range(4)]
    hashes = [chains[c][:n] for n, _, c in rows]
    tokens = [max(n * BS - short, 0) if n else 0 for n, short, _ in rows]
    trace = build_trace(hashes, tokens, ["t"] * len(rows), BS)
    view = full_blocks_only(trace)
    for r, (n, short, _) in enumerate(rows):
        got = view.hashes[view.blocks[view.offsets[r] : view.offsets[r + 1]]].tolist()
        assert got == hashes[r][: n - (n > 0 and short > 0)]
    assert np.array_equal(view.input_tokens, trace.input_tokens)
    assert view.n_unique == len(np.unique(view.blocks)) and view.last_token_rule.all()


def test_one_ideal_replica_counting_as_vllm_equals_simulate_counting_so(bundled_trace) -> None:  # type: ignore[no-untyped-def]
    """The option the ideal engine and ``simulate`` share (``--vllm-blocks``): one replica
    still equals the single LRU cache to the token, on the bundled hour."""
    from prefixscope.analysis.fleet.run import Engine, Fleet, Traffic, simulate_fleet
    from prefixscope.analysis.fleet.stepcost import StepCost
    from prefixscope.analysis.policies import POLICIES
    from prefixscope.analysis.trace.measure import hit_tokens

    view = full_blocks_only(bundled_trace)
    engine = Engine(StepCost(1e-3, 1e-4, 2e-6, 5e-7, 3e-6, 24.0, 6.0, "test"))
    none = Traffic(np.zeros(view.n_requests, np.int64))
    fleet = simulate_fleet(view, none, Fleet("round-robin", 1, 4_000), engine).hit_tokens
    cache = hit_tokens(view, POLICIES["lru"].hit_blocks(view, 4_000))
    plain = hit_tokens(bundled_trace, POLICIES["lru"].hit_blocks(bundled_trace, 4_000))
    np.testing.assert_array_equal(fleet, cache)
    assert cache.sum() != plain.sum()  # the hour has partial blocks: the option changes it

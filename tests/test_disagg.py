"""Disaggregated fleets: the prefill pool is the colocated fleet's prefill alone, the KV's
move is its bytes over the link, and the decode pool queues, admits and decodes by its
rules (``analysis/fleet/decode_pool.py``)."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.decode_pool import DecodePool, blocks_needed, decode
from prefixscope.analysis.fleet.disagg import (
    Link,
    link_for,
    prefill_only,
    simulate_disagg,
    transfer_seconds,
)
from prefixscope.analysis.fleet.run import Fleet, simulate_fleet
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.cli import main
from tests.oracles.decode_pool import reference_decode
from tests.test_fleet import ENGINE, sessions_trace
from tests.test_fleet_deployment import small  # noqa: F401 (a fixture)

#: A step of a flat 10 ms, whatever it holds: decode times by hand.
FLAT = StepCost(0.010, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, "test")
#: The decode terms only: 1 ms a step, 0.1 ms a decode, 1 µs a token of context.
TERMS = StepCost(0.001, 0.0, 1e-6, 0.0, 1e-4, 1.0, 1.0, "test")
ROOMY = DecodePool(4, 10**6, 16, FLAT, 256)


@pytest.fixture(scope="module")
def conversations() -> tuple:  # type: ignore[type-arg]
    return sessions_trace(n_sessions=30, turns=4, seed=3)


@pytest.mark.parametrize("router", ["round-robin", "kv-aware", "least-loaded"])
@pytest.mark.parametrize("replicas", [1, 3])
def test_an_unbounded_link_and_an_idle_decode_pool_give_the_prefill_alone(
    conversations: tuple,  # type: ignore[type-arg]
    router: str,
    replicas: int,
) -> None:
    trace, traffic = conversations
    fleet = Fleet(router, replicas, 40)
    out = simulate_disagg(trace, traffic, fleet, ENGINE, ROOMY, Link("inf", math.inf), 1e5)
    alone = simulate_fleet(trace, prefill_only(traffic), fleet, ENGINE)
    assert np.array_equal(out.ttft, alone.ttft)  # to the step: the same floats
    assert np.array_equal(out.prefill.hit_tokens, alone.hit_tokens)
    assert (out.decode_wait_s == 0).all()
    # a colocated replica serving one output token computes the same steps
    assert np.array_equal(alone.busy, out.prefill.busy)


@pytest.mark.parametrize("gbps", [0.5, 50.0, 450.0])
def test_the_kv_move_is_its_bytes_over_the_link(conversations: tuple, gbps: float) -> None:  # type: ignore[type-arg]
    trace, traffic = conversations
    fleet = Fleet("round-robin", 2, 40)
    per_gpu = 131072.0  # bytes of a token's KV on one GPU
    out = simulate_disagg(trace, traffic, fleet, ENGINE, ROOMY, Link("x", gbps), per_gpu)
    free = simulate_disagg(trace, traffic, fleet, ENGINE, ROOMY, Link("inf", math.inf), per_gpu)
    move = trace.input_tokens * per_gpu / (gbps * 1e9)
    np.testing.assert_allclose(out.transfer_s, move, rtol=1e-12)
    np.testing.assert_allclose(out.ttft - free.ttft, move, rtol=1e-9, atol=1e-12)


def test_links_name_their_figures() -> None:
    from prefixscope.analysis.cost.gpus import resolve_gpu

    h200, a100 = resolve_gpu("h200"), resolve_gpu("a100")
    assert link_for("rdma", h200).gbps == 50.0  # a 400 Gb/s NIC per GPU
    assert link_for("rdma", a100).gbps == 25.0  # 200 Gb/s
    assert link_for("nvlink", h200).gbps == h200.nvlink_gbps
    assert math.isinf(link_for("inf", h200).gbps)
    assert link_for("12.5", h200).gbps == 12.5
    for bad in ("-1", "0", "nan", "fast", "inf5"):
        with pytest.raises(ValueError, match="a KV link is rdma"):
            link_for(bad, h200)
    assert transfer_seconds(np.array([1000]), 1e6, Link("l", 1.0, 0.002))[0] == pytest.approx(1.002)


@pytest.mark.parametrize(
    ("ready", "outputs", "expect_done"),
    [
        ([0.0], [5], [0.040]),  # four decode steps of 10 ms after the first token
        ([0.0], [1], [0.0]),  # its one token came with the prefill: done on landing
        ([0.0, 0.0], [3, 3], [0.020, 0.020]),  # one batch
        ([0.0, 0.005], [3, 3], [0.020, 0.030]),  # the second joins at the step boundary
    ],
)
def test_decode_steps_by_hand(ready: list, outputs: list, expect_done: list) -> None:
    pool = DecodePool(1, 10**6, 16, FLAT, 256)
    n = len(ready)
    out = decode(np.array(ready), np.zeros(n), np.full(n, 64), np.array(outputs), pool)
    np.testing.assert_allclose(out.done_at, expect_done, atol=1e-12)
    np.testing.assert_allclose(out.landed_at, ready)
    assert out.decode_tokens.sum() == sum(o - 1 for o in outputs)


def test_a_step_costs_the_fleets_decode_terms() -> None:
    # two decodes at contexts 100 and 300: 1 ms + 2 × 0.1 ms + 400 µs the first step
    pool = DecodePool(1, 10**6, 16, TERMS, 256)
    out = decode(np.zeros(2), np.zeros(2), np.array([100, 300]), np.array([2, 2]), pool)
    assert out.done_at[0] == pytest.approx(0.001 + 2e-4 + 400e-6)
    assert out.busy[0] == pytest.approx(out.done_at[0])


def test_a_full_decode_pool_makes_requests_wait_first_come_first_served() -> None:
    # a replica of 8 blocks of 16 tokens: request 0 takes 6, request 1 needs 6 and waits for
    # it; request 2 needs 1 and fits at once, but does not overtake request 1
    pool = DecodePool(1, 8, 16, FLAT, 256)
    inputs, outputs = np.array([80, 80, 8]), np.array([11, 11, 2])
    assert list(blocks_needed(inputs, outputs, 16)) == [6, 6, 1]
    out = decode(np.array([0.0, 0.001, 0.002]), np.zeros(3), inputs, outputs, pool)
    assert out.admitted_at[1] == pytest.approx(out.done_at[0]) == pytest.approx(0.100)
    assert out.admitted_at[2] == pytest.approx(out.done_at[0])


def test_a_request_larger_than_a_replica_is_refused_and_the_rest_are_served() -> None:
    pool = DecodePool(2, 4, 16, FLAT, 256)
    out = decode(np.zeros(3), np.zeros(3), np.array([16, 200, 16]), np.array([3, 3, 3]), pool)
    assert list(out.refused) == [False, True, False]
    assert np.isnan(out.done_at[1]) and np.isfinite(out.done_at[[0, 2]]).all()
    assert list(out.replica[[0, 2]]) == [0, 1]  # the most free blocks, then the lower replica


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 2, allow_nan=False),
            st.floats(0, 0.05, allow_nan=False),
            st.integers(1, 300),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 3),
    st.integers(1, 40),
    st.integers(1, 4),
)
def test_the_decode_pool_keeps_its_rules(reqs: list, replicas: int, cap: int, seqs: int) -> None:  # type: ignore[type-arg]
    ready, move, inputs, outputs = (np.array(c) for c in zip(*reqs, strict=True))
    pool = DecodePool(replicas, cap, 16, TERMS, seqs)
    out = decode(ready, move, inputs, outputs, pool)
    need = blocks_needed(inputs, outputs, 16)
    assert list(out.refused) == list(need > cap)
    ok = ~out.refused
    assert (out.admitted_at[ok] >= ready[ok]).all()
    np.testing.assert_allclose(out.landed_at[ok], out.admitted_at[ok] + move[ok])
    assert (out.done_at[ok] >= out.landed_at[ok]).all()
    assert out.decode_tokens.sum() == int((np.maximum(outputs[ok], 1) - 1).sum())
    for j in range(replicas):  # room and seats never exceeded, at every admission
        mine = np.flatnonzero(out.replica == j)
        for t in out.admitted_at[mine]:
            held = mine[(out.admitted_at[mine] <= t) & (out.done_at[mine] > t)]
            assert need[held].sum() <= cap and len(held) <= seqs
    # first come, first served among requests that fit: admitted in the order they were ready
    order = np.lexsort((np.arange(len(ready)), ready))
    served = [i for i in order if ok[i]]
    assert np.all(np.diff(out.admitted_at[served]) >= 0)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 1, allow_nan=False),
            st.sampled_from([0.0, 0.001, 0.01, 0.03]),
            st.integers(1, 200),
            st.integers(0, 30),
        ),
        min_size=1,
        max_size=50,
    ),
    st.integers(1, 3),
    st.integers(1, 30),
    st.integers(1, 5),
)
def test_the_compiled_loop_is_the_plain_python_one(
    reqs: list, replicas: int, cap: int, seqs: int
) -> None:  # type: ignore[type-arg]
    # ties included: ready times and moves from a few values land requests at one instant
    ready, move, inputs, outputs = (np.array(c) for c in zip(*reqs, strict=True))
    pool = DecodePool(replicas, cap, 16, TERMS, seqs)
    got = decode(ready, move, inputs, outputs, pool)
    want = reference_decode(ready, move, inputs, outputs, pool)
    for name in (
        "replica",
        "admitted_at",
        "landed_at",
        "done_at",
        "busy",
        "steps",
        "decode_tokens",
    ):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_the_cli_writes_both_layouts(small: Path, capsys) -> None:  # noqa: ANN001, F811
    assert main(["disagg", "--warehouse", str(small), "--prefill", "h100x1*2",
                 "--decode", "h100x1*1", "--router", "round-robin"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "2 × h100x1 → 1 × h100x1" in out and "colocated 3 × h100x1" in out
    with duckdb.connect(str(small), read_only=True) as con:
        got = con.execute(
            "SELECT layout, gpus, requests, refused, prefill_replicas, decode_replicas, link "
            "FROM disagg_fleets ORDER BY layout"
        ).fetchall()
    assert got == [("colocated", 3, 120, 0, 3, 0, None), ("disaggregated", 3, 120, 0, 2, 1, "rdma")]


def test_a_pool_of_a_gpu_file_runs(small: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001, F811
    """``--prefill FILE.tomlx1*2``: the flag keeps the deployment it read (the GPU's own name,
    unknown to the catalog, would not read back), and the rows name that GPU."""
    path = tmp_path / "h20.toml"
    path.write_text('name = "h20"\ntflops = 148\ntbps = 4.0\nhbm_gib = 96\n')
    assert main(["disagg", "--warehouse", str(small), "--prefill", f"{path}x1*2",
                 "--decode", "h100x1*1", "--router", "round-robin"]) == 0  # fmt: skip
    assert "2 × h20x1 → 1 × h100x1" in capsys.readouterr().out


def test_the_cli_refuses_a_model_that_does_not_fit_before_it_runs(small: Path, capsys) -> None:  # noqa: ANN001, F811
    code = main(["disagg", "--warehouse", str(small), "--prefill", "h100x1*2",
                 "--decode", "h100x1*1", "--model", "llama-3.1-70b"])  # fmt: skip
    assert code == 2
    assert "does not fit on h100x1" in capsys.readouterr().err
    with duckdb.connect(str(small), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs WHERE command = 'disagg'").fetchone() == (0,)

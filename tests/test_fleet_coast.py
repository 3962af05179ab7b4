"""A replica's decode-only steps between events are summed apart (``_sched.coast``), each as
the step sums it: a batch's clock is the same whether its steps were coasted or stepped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.run import Engine, Fleet, FleetOutcome, Traffic, simulate_fleet
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.trace.csr import build_trace

# Every term nonzero, so a step's seconds grow with its context and few sums are exact.
COST = StepCost(a=1e-3, b=1e-4, c=2e-6, e=5e-7, f=3e-6, k1=24.0, k2=6.0, source="test")


def run(engine: str, bs: int, outputs: tuple[int, int], waiting_at: float | None) -> FleetOutcome:
    """Two replicas under round-robin, two requests running at most on each: requests 0 and
    2 (a shared prefix, long decodes, one batch) on replica 0, 1 and 3 (one token) on replica
    1, and where ``waiting_at`` is given, request 4 arriving on replica 0 then, to wait behind
    the full batch."""
    chains, times = [[1, 2, 3], [9], [1, 2, 4], [7]], [0.0] * 4
    inputs, out = [3 * bs - 1, bs, 3 * bs, bs], [outputs[0], 1, outputs[1], 1]
    if waiting_at is not None:
        chains, inputs, times, out = chains + [[5]], inputs + [bs], times + [waiting_at], out + [1]
    trace = build_trace(chains, inputs, ["t"] * len(chains), bs, times)
    fleet = Fleet("round-robin", 2, 1024, engine=engine)  # no request waits for blocks
    return simulate_fleet(trace, Traffic(np.array(out, np.int64)), fleet, Engine(COST, 64, 2))


@pytest.mark.parametrize("engine", ["ideal", "vllm", "sglang"])
@settings(max_examples=30, deadline=None)
@given(
    bs=st.integers(2, 16),
    outputs=st.tuples(st.integers(100, 400), st.integers(100, 400)),
    waiting_at=st.floats(0.02, 0.1, allow_nan=False),
)
def test_a_batch_ends_at_the_same_time_whether_its_steps_were_coasted_or_stepped(
    engine: str, bs: int, outputs: tuple[int, int], waiting_at: float
) -> None:
    """With its queue empty, replica 0's decode-only steps are coasted; with request 4 waiting
    (the batch is full), the same steps run through the scheduler's step. The first of its
    decodes to end does so at the same moment to the bit: a coast that summed its run in
    closed form fails here in every engine (tried)."""
    coasted = run(engine, bs, outputs, None)
    stepped = run(engine, bs, outputs, waiting_at)
    first = [0, 2][int(np.argmin(outputs))]
    end = coasted.done_at[first]
    assume(waiting_at < end)  # request 4 arrived while the batch still decoded
    assert stepped.first_start[4] >= end  # ... and waited behind it
    assert stepped.done_at[first] == end, f"{stepped.done_at[first]!r} stepped, {end!r} coasted"
    assert coasted.steps[0] >= max(outputs)  # a step per decoded token

"""vLLM takes a prompt's blocks chunk by chunk (``fleet/_admit.py``), worked by hand on steps of
one second (the step cost's ``a`` alone), blocks of 2 tokens and a budget of 4 tokens a step,
against the compiled pool and its plain-Python reference."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from prefixscope.analysis.fleet.run import Engine, Fleet, FleetOutcome, Traffic, simulate_fleet
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.trace.csr import build_trace
from tests.oracles.fleet_pool import reference_pool_fleet

SECOND = StepCost(a=1.0, b=0.0, c=0.0, e=0.0, f=0.0, k1=1.0, k2=1.0, source="hand")
ENGINE = Engine(SECOND, budget_tokens=4, max_seqs=4)
SIMULATORS = pytest.mark.parametrize(
    "simulate", [reference_pool_fleet, simulate_fleet], ids=["reference", "kernel"]
)


@SIMULATORS
@pytest.mark.parametrize(("engine", "mean"), [("vllm", 4.0), ("sglang", 6.0)])
def test_a_prompt_holds_its_blocks_chunk_by_chunk_under_vllm(
    simulate: Callable[..., FleetOutcome], engine: str, mean: float
) -> None:
    """One prompt of 6 blocks computed in three steps of 4 tokens: vLLM holds 2, 4 and 6
    blocks in them (a mean of 4); SGLang reserves all 6 at admission."""
    trace = build_trace([[1, 2, 3, 4, 5, 6]], [12], ["t"], 2, [0.0])
    out = simulate(trace, Traffic(np.array([1])), Fleet("round-robin", 1, 7, engine=engine), ENGINE)
    assert out.ttft.tolist() == [3.0]
    assert out.running_blocks_mean.tolist() == [mean]
    assert out.running_blocks_p95.tolist() == [6]


@SIMULATORS
def test_a_running_prefill_whose_next_chunk_finds_no_block_preempts_itself(
    simulate: Callable[..., FleetOutcome],
) -> None:
    """A (1 block, 9 tokens out) and B (6 blocks) arrive together on a pool of 7 blocks.

    - Step 1: A takes its block and computes its prompt; B's whole prompt fits the 6 free
      blocks, so it is admitted, but takes only its first chunk's block (2 tokens).
    - Steps 2, 3: A's decode takes a block at step 2; B's chunks reach 3, then 4 blocks.
    - Step 4: A's decode takes the last free block; B's next chunk needs 2 more: B, the newest
      running request, is preempted, and no waiting request is admitted in that step.
    - Steps 5 to 9: A decodes to its end (it takes blocks at steps 6 and 8, evicting B's
      blocks 13, 12). B waits: its 6 blocks (its 4 cached ones count) never fit beside A's.
    - Steps 10, 11: B is readmitted, finds blocks 10 and 11 (4 tokens), computes 8 tokens.
    """
    trace = build_trace([[1], [10, 11, 12, 13, 14, 15]], [2, 12], ["t"] * 2, 2, [0.0, 0.0])
    fleet = Fleet("round-robin", 1, 7, engine="vllm")
    out = simulate(trace, Traffic(np.array([9, 1])), fleet, ENGINE)
    assert out.preemptions.tolist() == [1]
    assert out.ttft.tolist() == [1.0, 11.0]
    assert out.done_at.tolist() == [9.0, 11.0]
    assert out.hit_tokens.tolist() == [0, 0]  # B's first admission found nothing
    assert out.preempted.tolist() == [[0, 0, 0], [1, 12, 4]]

"""The pools with a DRAM tier or a store below them (vLLM's offloading,
``fleet/_tiers.write_through``; SGLang's HiCache, ``write_host``), worked by hand on steps of
one second (the step cost's ``a`` alone), blocks of 2 tokens, a pool of 2 blocks and a KV of
1 GB a token, against the compiled pool and its plain-Python reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from prefixscope.analysis.fleet.run import Fleet, FleetOutcome, Tiers, Traffic
from prefixscope.analysis.trace.csr import build_trace
from tests.test_fleet_chunks import ENGINE as STEPS_OF_A_SECOND
from tests.test_fleet_chunks import SIMULATORS

ENGINE = replace(STEPS_OF_A_SECOND, kv_bytes_per_token=1e9)
#: A (blocks 1, 2) at 0 s, B (3, 4) at 10 s, which evicts A's from the pool of 2, and C (1,
#: 2 again) at 20 s; every prompt 4 tokens, one token out.
TRACE = build_trace([[1, 2], [3, 4], [1, 2]], [4, 4, 4], ["t"] * 3, 2, [0.0, 10.0, 20.0])
TRAFFIC = Traffic(np.array([1, 1, 1]))


@SIMULATORS
@pytest.mark.parametrize(
    ("engine", "tiers", "source"),
    [
        ("vllm", Tiers(dram_blocks=4, dram_gbps=4.0), 1),
        ("vllm", Tiers(store_blocks=4, store_gbps=4.0), 2),
        ("sglang", Tiers(dram_blocks=4, dram_gbps=4.0), 1),
        ("sglang", Tiers(dram_blocks=2, store_blocks=4, dram_gbps=4.0, store_gbps=4.0), 2),
    ],
    ids=["vllm-dram", "vllm-store", "sglang-host", "sglang-storage"],
)
def test_a_prompt_the_pool_evicted_is_loaded_from_the_tier_it_was_written_to(
    simulate: Callable[..., FleetOutcome], engine: str, tiers: Tiers, source: int
) -> None:
    """A's prompt was written to the tier when computed. C finds it there, not in the pool:
    its first block is loaded (its last is computed, as a whole hit's last token is), 2
    tokens at 4 GB/s, 0.5 s before its step of 1 s: TTFT 1.5 s. The loaded block takes pool
    space as a computed one does, and its saving is credited to the tier. Under ``sglang``
    with host memory of 2 blocks, B's write evicts A's blocks from it (the GPU evicted them
    when B was admitted), but the store, written from host memory, still has them."""
    fleet = Fleet("round-robin", 1, 2, engine=engine, tiers=tiers)
    out = simulate(TRACE, TRAFFIC, fleet, ENGINE)
    assert out.ttft.tolist() == [1.0, 1.0, 1.5]
    assert out.hit_tokens.tolist() == [0, 0, 2]
    assert out.source_tokens[2].tolist() == [2 if s == source else 0 for s in range(3)]
    assert out.transfer_s.tolist() == [0.0, 0.0, 0.5]
    assert out.source_saved_s[2, source] == pytest.approx(-0.5)  # a flat step: loading costs
    assert out.running_blocks_p95.tolist() == [2]


@SIMULATORS
@pytest.mark.parametrize(("dram", "hit"), [(1, 0), (2, 0), (3, 2), (4, 2)])
def test_a_dram_tier_keeps_the_prompts_written_last(
    simulate: Callable[..., FleetOutcome], dram: int, hit: int
) -> None:
    """B's prompt, written after A's, pushes A's blocks out of a DRAM tier of fewer than 4,
    deepest first: A's block 2 leaves before its block 1. With 3 blocks, block 1 stays and C
    loads it (its run ends at block 2); with 4, C's run is its whole prompt, whose last
    block is computed: 2 tokens either way. With 2 or fewer C finds nothing below the pool."""
    fleet = Fleet("round-robin", 1, 2, engine="vllm", tiers=Tiers(dram_blocks=dram))
    out = simulate(TRACE, TRAFFIC, fleet, ENGINE)
    assert out.hit_tokens.tolist() == [0, 0, hit]


@SIMULATORS
@pytest.mark.parametrize(("engine", "hit", "ttft"), [("vllm", 0, 1.0), ("sglang", 2, 1.5)])
def test_host_memory_evicts_only_what_the_gpu_evicted_under_sglang(
    simulate: Callable[..., FleetOutcome], engine: str, hit: int, ttft: float
) -> None:
    """A pool of 4 blocks over a DRAM tier of 2. A (blocks 1, 2) is written to DRAM. B (3, 4,
    four tokens out) is admitted while the pool still caches A, then grows into A's blocks
    as it decodes, evicting them from the pool. C (1, 2) comes after.

    - vLLM's DRAM tier is an LRU of what was written: B's prompt pushed A's out, so C
      computes its prompt (TTFT 1 s).
    - SGLang's host memory holds A's blocks while the GPU does and evicts only blocks the GPU
      evicted: B's write finds none to evict and is dropped, A's stay, and C loads its first
      block from host memory (TTFT 1.5 s)."""
    fleet = Fleet("round-robin", 1, 4, engine=engine, tiers=Tiers(dram_blocks=2, dram_gbps=4.0))
    out = simulate(TRACE, Traffic(np.array([1, 4, 1])), fleet, ENGINE)
    assert out.hit_tokens.tolist() == [0, 0, hit]
    assert out.ttft.tolist() == [1.0, 1.0, ttft]
    assert out.source_tokens[2].tolist() == [0, hit, 0]

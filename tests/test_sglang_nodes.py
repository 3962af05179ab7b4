"""SGLang's radix cache evicts a leaf *node* whole, not a page (``_pool.py``, "Radix nodes"):
a request's new blocks, or each chunk of its prompt, make one node. The expected hits are
SGLang 0.5.23's own ``RadixCache`` on the same traces at 512-token pages, one request at a
time (``benchmarks/sglang_driver.py``, ``--chunk`` the step's budget); evicting page by
page, the last request would hit 5 and 7 blocks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefixscope.analysis.fleet.run import Fleet, Traffic, simulate_fleet
from prefixscope.analysis.trace.csr import build_trace
from tests.oracles.fleet_pool import reference_pool_fleet
from tests.test_fleet import ENGINE

BS = 16


@pytest.mark.parametrize(
    ("prompts", "chunk_blocks", "want"),
    [
        # A's six blocks are one node: C's one missing block evicts all of A
        ([list(range(1, 7)), [11, 12, 13, 14], [21, 22, 23], list(range(1, 7))], 512, 0),
        # computed four blocks a step, A is two nodes: C evicts the second, A's first half hits
        ([list(range(1, 9)), [11, 12, 13], [21, 22], list(range(1, 9))], 4, 4),
    ],
)
def test_sglang_evicts_a_whole_radix_node(
    prompts: list[list[int]], chunk_blocks: int, want: int
) -> None:
    trace = build_trace(
        prompts, [len(p) * BS for p in prompts], ["t"] * 4, BS, times=[0.0, 10.0, 20.0, 30.0]
    )
    traffic = Traffic(np.zeros(4, np.int64))
    engine = replace(ENGINE, budget_tokens=chunk_blocks * BS, max_seqs=4)
    fleet = Fleet("round-robin", 1, 12, load_scale=1e-6, engine="sglang")
    got = simulate_fleet(trace, traffic, fleet, engine)
    assert got.hit_blocks.tolist() == [0, 0, 0, want]
    assert reference_pool_fleet(trace, traffic, fleet, engine).hit_blocks.tolist() == [
        0,
        0,
        0,
        want,
    ]


def test_a_free_block_that_gains_a_cached_child_is_no_longer_an_evictable_leaf() -> None:
    """A case the pool's hypothesis test found: request 34 (block 1, 9 tokens out) finishes
    and caches its answer's block 3 under block 2, a free cached leaf. Block 2 then has a
    child, so the next eviction (request 43's decode) must take block 3, and request 44
    finds blocks 1 and 2. The compiled pool once left block 2 among the evictable leaves and
    evicted it under its child: request 44 found block 1 alone."""
    offsets = np.array([0] + [1] * 12 + [3] * 3 + [4] * 17 + [7] * 2 + [8] * 10 + [11] * 7)
    blocks = np.array([0, 1, 2, 1, 1, 2, 3, 1, 1, 2, 3], np.int32)
    inputs = np.ones(51, np.int64)
    inputs[[0, 12, 15, 32, 34, 44]] = [4, 8, 4, 12, 4, 12]
    prompts = [blocks[offsets[r] : offsets[r + 1]].tolist() for r in range(51)]
    tenants = ["t2" if r in (34, 44) else "t0" for r in range(51)]
    trace = build_trace(prompts, inputs.tolist(), tenants, 4, times=[0.0] * 51)
    output = np.zeros(51, np.int64)
    output[[34, 36, 42, 43]] = [9, 5, 6, 5]
    fleet = Fleet("round-robin", 1, 6, load_scale=0.5, engine="sglang")
    engine = replace(ENGINE, budget_tokens=8, max_seqs=2)
    got = simulate_fleet(trace, Traffic(output), fleet, engine)
    want = reference_pool_fleet(trace, Traffic(output), fleet, engine)
    assert got.hit_blocks[44] == want.hit_blocks[44] == 2
    assert (got.hit_blocks == want.hit_blocks).all()

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

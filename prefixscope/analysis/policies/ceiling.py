"""``ceiling``: an infinite cache. A block hits when any earlier request looked it up.

It bounds every policy from above; vectorized, no per-block loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies.base import Outcome, PolicyOptions
from prefixscope.analysis.trace.csr import Trace


def leading_run(hit: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per request, how many of its first blocks are all ``hit`` (``hit`` is per lookup)."""
    n_blocks = np.diff(offsets)
    out = np.zeros(len(n_blocks), dtype=np.int32)
    if len(hit) == 0:
        return out
    request = np.repeat(np.arange(len(n_blocks)), n_blocks)
    position = np.arange(len(hit)) - offsets[request]
    first_miss = np.where(hit, np.iinfo(np.int64).max, position)
    some = n_blocks > 0  # reduceat needs non-empty segments
    out[some] = np.minimum(np.minimum.reduceat(first_miss, offsets[:-1][some]), n_blocks[some])
    return out


@dataclass(frozen=True)
class Ceiling:
    name: str = "ceiling"
    bounded: bool = False

    def replay(
        self, trace: Trace, capacity_blocks: int | None = None, options: PolicyOptions | None = None
    ) -> Outcome:
        request = trace.request_of_lookup
        first_lookup = trace.first_lookup
        first_request = request[first_lookup]  # dense ids are sorted, so this indexes by id
        seen_before = first_request[trace.blocks] < request
        hits = leading_run(seen_before, trace.offsets)
        # A block is inserted by the request that first looked it up, and never leaves.
        owner = trace.tenant_codes[first_request]
        position = np.arange(trace.n_lookups) - trace.offsets[request]
        in_run = position < hits[request]
        cross = in_run & (owner[trace.blocks] != trace.tenant_codes[request])
        return Outcome(hits, cross, -1)

    def hit_blocks(
        self, trace: Trace, capacity_blocks: int | None = None, options: PolicyOptions | None = None
    ) -> np.ndarray:
        return self.replay(trace).hit_blocks

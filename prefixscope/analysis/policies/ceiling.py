"""``ceiling``: an infinite cache. A block hits when any earlier request looked it up.

It bounds every policy from above. One compiled pass over the lookups: per lookup it keeps
one bit (whether the hit crossed tenants), so at 250 M lookups it needs a few hundred MB where
the same rule in whole-array numpy needed about 8 GB.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from prefixscope.analysis.policies.base import Outcome, PolicyOptions
from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class Ceiling:
    name: str = "ceiling"
    label: str = "the unbounded ceiling"
    bounded: bool = False

    def replay(
        self, trace: Trace, capacity_blocks: int | None = None, options: PolicyOptions | None = None
    ) -> Outcome:
        kind = np.int32 if trace.n_requests < 2**31 else np.int64
        unseen = np.full(trace.n_unique, -1, kind)
        first_request = _first_requests(trace.offsets, trace.blocks, unseen)
        hits, cross = _ceiling(
            trace.offsets, trace.blocks, first_request, trace.tenant_codes, len(trace.tenants) > 1
        )
        return Outcome(hits, cross, -1)

    def hit_blocks(
        self, trace: Trace, capacity_blocks: int | None = None, options: PolicyOptions | None = None
    ) -> np.ndarray:
        return self.replay(trace).hit_blocks


def leading_runs(trace: Trace) -> np.ndarray:
    """Per request the unbounded cache's leading run (int32): its ``hit_blocks`` without the
    per-lookup tenant bits (what the fleet's miss budget reads)."""
    kind = np.int32 if trace.n_requests < 2**31 else np.int64
    first = _first_requests(trace.offsets, trace.blocks, np.full(trace.n_unique, -1, kind))
    return _runs(trace.offsets, trace.blocks, first)


@numba.njit(cache=True, nogil=True)
def _runs(offsets, blocks, first_request):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    n = len(offsets) - 1
    runs = np.zeros(n, np.int32)
    for r in range(n):
        k = offsets[r]
        while k < offsets[r + 1] and first_request[blocks[k]] < r:
            k += 1
        runs[r] = k - offsets[r]
    return runs


@numba.njit(cache=True, nogil=True)
def _first_requests(offsets, blocks, first):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Per dense id, the first request that looks it up (``first``: all -1, int32 below 2**31
    requests): one pass over the lookups, where the request of every lookup would be a
    gigabyte at 250 M."""
    for r in range(offsets.size - 1):
        for p in range(offsets[r], offsets[r + 1]):
            if first[blocks[p]] < 0:
                first[blocks[p]] = r
    return first


@numba.njit(cache=True, nogil=True)
def _ceiling(offsets, blocks, first_request, tenant_codes, tenants):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Per request the leading run of blocks an earlier request looked up; per lookup whether
    it is in that run and was inserted (first looked up) by another tenant (``tenants``: more
    than one, else none can)."""
    n = len(offsets) - 1
    hits = np.zeros(n, np.int32)
    cross = np.zeros(len(blocks), np.bool_)
    for r in range(n):
        lo, hi = offsets[r], offsets[r + 1]
        k = lo
        while k < hi and first_request[blocks[k]] < r:
            if tenants:
                cross[k] = tenant_codes[first_request[blocks[k]]] != tenant_codes[r]
            k += 1
        hits[r] = k - lo
    return hits, cross

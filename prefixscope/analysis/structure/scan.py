"""One pass over the lookups in replay order, and what several tables start from: each block's
tree (its parent and depth), how many requests use it, how many full blocks follow it (rule 4
of :mod:`turns`), a dense (tenant, block) key per lookup (parents are of the same tenant), and
the infinite cache's outcome (``ceiling``: a block hits when an earlier request looked it up).

All of it follows from what the pass keeps per block beside its outputs, its first request and
the block before it at a full position, so one pass replaces a sort of the lookups per
question. The ceiling outcome is the
``ceiling`` policy's, lookup for lookup (``tests/test_structure.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from prefixscope.analysis.policies import Outcome
from prefixscope.analysis.trace.csr import Trace

NONE = -1


@dataclass(frozen=True)
class Scan:
    parent: np.ndarray  # int32 per dense id: the block before it at its first lookup (NONE)
    depth: np.ndarray  # int32 per dense id: its 0-based position
    requests: np.ndarray  # int32 per dense id: distinct requests that look it up
    forks: np.ndarray  # int32 per dense id: distinct full blocks that follow it
    key: np.ndarray  # int32 per lookup: its (tenant, block) pair, dense below n_keys
    n_keys: int
    ceiling: Outcome


def full_blocks(trace: Trace) -> np.ndarray:
    """Full blocks per request: all of them for token sources, all but a partial last block
    for hash-id traces (``len = ceil(input_tokens / block_size)``)."""
    return np.minimum(trace.blocks_per_request, trace.input_tokens // trace.block_size)


def scan(trace: Trace) -> Scan:
    # Allocated by numpy, not in the compiled loop: numpy asks for huge pages on large arrays,
    # which spares most page faults of the per-block state (the policies' kernels do the same).
    u, n, multi = trace.n_unique, trace.n_requests, len(trace.tenants) > 1
    parent, full_parent = np.full(u, NONE, np.int32), np.full(u, NONE, np.int32)
    depth, requests, forks = np.zeros(u, np.int32), np.zeros(u, np.int32), np.zeros(u, np.int32)
    key, hits = np.empty(trace.n_lookups, np.int32), np.zeros(n, np.int32)
    cross = np.zeros(trace.n_lookups if multi else 0, np.bool_)
    extra = _scan(
        trace.offsets,
        trace.blocks,
        trace.tenant_codes,
        full_blocks(trace),
        multi,
        np.full(u, NONE, np.int32),  # first request per block
        full_parent,  # the block before it at a full position
        parent,
        depth,
        requests,
        forks,
        key,
        hits,
        cross,
    )
    del full_parent
    if len(extra):  # (block, child) pairs of ids that are not chained: counted once each
        pairs = np.unique(extra)
        forks += np.bincount(pairs // trace.n_unique, minlength=trace.n_unique).astype(np.int32)
    # A block several tenants look up gets one key per tenant after the first: few pairs.
    shared = np.flatnonzero(key == NONE)
    n_keys = trace.n_unique
    if len(shared):
        request = np.searchsorted(trace.offsets, shared, side="right") - 1
        pairs = trace.tenant_codes[request].astype(np.int64) * trace.n_unique
        numbered, inverse = np.unique(pairs + trace.blocks[shared], return_inverse=True)
        key[shared] = n_keys + inverse.ravel()
        n_keys += len(numbered)
    return Scan(parent, depth, requests, forks, key, n_keys, Outcome(hits, cross, -1))


@numba.njit(cache=True, nogil=True)
def _scan(
    offsets,
    blocks,
    tenants,
    full,
    multi_tenant,
    first,
    full_parent,
    parent,
    depth,
    requests,
    forks,
    key,
    hits,
    cross,
):  # type: ignore[no-untyped-def]
    # Requests come in replay order: a block's first lookup is its earliest request. A block
    # counted for this request has its count negated until the request ends, which tells a
    # repeat within one request from a new use without a per-block marker of its own.
    n_unique = first.size
    extra = []
    for r in range(offsets.size - 1):
        start = offsets[r]
        t = tenants[r]
        run = True
        for p in range(start, offsets[r + 1]):
            b = blocks[p]
            k = p - start
            if first[b] == NONE:
                first[b] = r
                if k > 0:
                    parent[b] = blocks[p - 1]
            depth[b] = k
            if requests[b] >= 0:
                requests[b] = -1 - requests[b]
            owner = tenants[first[b]]  # the ceiling's copy is the first requester's
            key[p] = b if owner == t else NONE
            if run and first[b] < r:
                hits[r] += 1
                if multi_tenant:
                    cross[p] = owner != t
            else:
                run = False
            if 0 < k < full[r]:
                a = blocks[p - 1]
                if full_parent[b] == NONE:
                    full_parent[b] = a
                    forks[a] += 1
                elif full_parent[b] != a:
                    extra.append(np.int64(a) * n_unique + b)
        for p in range(start, offsets[r + 1]):
            b = blocks[p]
            if requests[b] < 0:
                requests[b] = -requests[b]
    return np.array(extra, dtype=np.int64)

"""One pass over the lookups in replay order, and what several tables start from: each block's
tree (its parent and depth), how many requests use it, how many full blocks follow it (rule 4
of :mod:`turns`), a dense (tenant, block) key per lookup (parents are of the same tenant), and
the infinite cache's outcome (``ceiling``: a block hits when an earlier request looked it up).

All of it follows from two facts per block kept during the pass, its first and its latest
request, so one pass replaces a sort of the lookups per question. The ceiling outcome is the
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
    parent, depth, requests, forks, key, hits, cross, extra = _scan(
        trace.offsets,
        trace.blocks,
        trace.tenant_codes,
        full_blocks(trace),
        trace.n_unique,
        len(trace.tenants) > 1,
    )
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
def _scan(offsets, blocks, tenants, full, n_unique, multi_tenant):  # type: ignore[no-untyped-def]
    # Requests come in replay order: a block's first lookup is its earliest request, and its
    # latest request tells a repeat within one request from a new use.
    n = offsets.size - 1
    first = np.full(n_unique, NONE, np.int32)
    latest = np.full(n_unique, NONE, np.int32)
    parent = np.full(n_unique, NONE, np.int32)
    depth = np.zeros(n_unique, np.int32)
    requests = np.zeros(n_unique, np.int32)
    full_parent = np.full(n_unique, NONE, np.int32)  # the block before it at a full position
    forks = np.zeros(n_unique, np.int32)
    extra = []
    key = np.empty(blocks.size, np.int32)
    hits = np.zeros(n, np.int32)
    cross = np.zeros(blocks.size if multi_tenant else 0, np.bool_)
    for r in range(n):
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
            if latest[b] != r:
                latest[b] = r
                requests[b] += 1
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
    return parent, depth, requests, forks, key, hits, cross, np.array(extra, dtype=np.int64)

"""``lru``: evict the least recently used block; among blocks last used by the same request,
the deepest first.

Every request touches its whole chain, so a parent is always used at least as recently as its
child, and on a tie the child goes first: the cache stays prefix-closed (a block never outlives
its parent). The order is total, so the cache after each request is exactly the
``capacity`` most recent blocks under the key (last request, -position).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from prefixscope.analysis.trace import Trace


@numba.njit(cache=True, nogil=True)
def lru_hit_blocks(offsets: np.ndarray, blocks: np.ndarray, n_unique: int, capacity: int):
    """Compiled core. A doubly linked recency list over dense ids with a sentinel at
    ``n_unique``: ``nxt[sentinel]`` is the next victim, ``prv[sentinel]`` the most recent."""
    sentinel = n_unique
    nxt = np.full(n_unique + 1, sentinel, np.int32)
    prv = np.full(n_unique + 1, sentinel, np.int32)
    cached = np.zeros(n_unique, np.bool_)
    size = 0
    n = offsets.size - 1
    hits = np.zeros(n, np.int32)
    for r in range(n):
        start = offsets[r]
        end = offsets[r + 1]
        k = 0
        while start + k < end and cached[blocks[start + k]]:
            k += 1
        hits[r] = k
        # Deepest first, so the request's root ends up most recent.
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            if cached[b]:
                nxt[prv[b]] = nxt[b]
                prv[nxt[b]] = prv[b]
            else:
                cached[b] = True
                size += 1
            last = prv[sentinel]
            nxt[last] = b
            prv[b] = last
            nxt[b] = sentinel
            prv[sentinel] = b
        while size > capacity:
            victim = nxt[sentinel]
            nxt[sentinel] = nxt[victim]
            prv[nxt[victim]] = sentinel
            cached[victim] = False
            size -= 1
    return hits


@dataclass(frozen=True)
class LRU:
    name: str = "lru"
    bounded: bool = True

    def hit_blocks(self, trace: Trace, capacity_blocks: int | None) -> np.ndarray:
        if capacity_blocks is None or capacity_blocks < 1:
            raise ValueError(f"lru needs a capacity of at least 1 block, got {capacity_blocks}")
        return lru_hit_blocks(trace.offsets, trace.blocks, trace.n_unique, int(capacity_blocks))

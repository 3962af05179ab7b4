"""The compiled LRU loop (see :mod:`.lru` for the rule it implements)."""

from __future__ import annotations

import numba
import numpy as np


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

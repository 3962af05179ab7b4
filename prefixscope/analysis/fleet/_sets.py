"""Sets of blocks for the fleet loop (``_kernel.py``): a doubly linked list per replica over
dense ids (eviction order: the front leaves first; the sentinel of replica ``i`` is node
``i·(n_unique + 1) + n_unique``), and ``uint64`` masks per block of which replicas hold it.
Invariant: block ``b`` is in replica ``i``'s list exactly when bit ``i`` of its mask is set."""

from __future__ import annotations

import numba
import numpy as np

# The list operations are the single-cache loops' own (one list per replica here).
from prefixscope.analysis.policies._lists import _push_back, _unlink


@numba.njit(inline="always")
def _bit(i):  # type: ignore[no-untyped-def]
    return np.uint64(1) << np.uint64(i)


#: No block pinned: the mask every list but a pinned cache's passes to :func:`_touch`.
UNPINNED = np.zeros(0, np.bool_)


@numba.njit(inline="always")
def _touch(blocks, start, end, i, base, s, held, nxt, prv, recency, pinned):  # type: ignore[no-untyped-def]
    """Insert (or refresh, when ``recency``) the request's blocks in list ``i``, deepest first;
    returns how many were new. A block of ``pinned`` (a mask over blocks; empty: none) is
    held but kept off the list once cached, so it never leaves and counts against the
    capacity, as ``policies/_lists.py`` ``lru`` keeps its pins."""
    added = 0
    bit = _bit(i)
    pins = pinned.size > 0
    for p in range(end - 1, start - 1, -1):
        b = blocks[p]
        v = base + b
        if held[b] & bit:
            if recency and not (pins and pinned[b]):
                _unlink(nxt, prv, v)
                _push_back(nxt, prv, s, v)
        else:
            held[b] |= bit
            added += 1
            if not (pins and pinned[b]):
                _push_back(nxt, prv, s, v)
    return added


@numba.njit(inline="always")
def _evict_to(i, base, s, limit, size, held, nxt, prv):  # type: ignore[no-untyped-def]
    bit = ~_bit(i)
    while size > limit and nxt[s] != s:
        v = nxt[s]
        _unlink(nxt, prv, v)
        held[v - base] &= bit
        size -= 1
    return size


@numba.njit(inline="always")
def _overlaps(blocks, start, end, held, n_rep, out):  # type: ignore[no-untyped-def]
    """``out[i]``: the leading run of the request's blocks that replica ``i`` holds."""
    full = ~np.uint64(0) if n_rep == 64 else _bit(n_rep) - np.uint64(1)
    mask = full
    k = 0
    for p in range(start, end):
        m = mask & held[blocks[p]]
        if m != mask:
            lost = mask & ~m
            for i in range(n_rep):
                if lost & _bit(i):
                    out[i] = k
            mask = m
        if mask == 0:
            break
        k += 1
    for i in range(n_rep):
        if mask & _bit(i):
            out[i] = k


@numba.njit(inline="always")
def _argmin(values, n_rep, first):  # type: ignore[no-untyped-def]
    """The replica with the smallest value; ties go to the first from ``first`` on (rotating)."""
    best = first % n_rep
    for j in range(1, n_rep):
        i = (first + j) % n_rep
        if values[i] < values[best]:
            best = i
    return best

"""The compiled replay loop of belady, over a heap. It follows the request cycle of
``_lists.py``, and returns the same triple."""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.policies._lists import NONE

# --- a binary min-heap of (key, block) entries with lazy deletion --------------------------------
# Both keys are one int64, ``(n_requests - next use) << 32 | touch number``, the smallest
# evicted first; 0 means not cached (touch numbers start at 1, so every key is unique). An entry
# is live while its block is a cached leaf whose key is still the entry's: re-keying a leaf
# pushes a new entry and a leaf that gains a child is left where it is, both to be discarded
# when they reach the root. So the heap keeps no positions, and a sift moves entries within
# its own array only (an indexed heap writes a block's position at every level, at random).


@numba.njit(inline="always")
def _live(node, kids, key, b):  # type: ignore[no-untyped-def]
    return node[b] == key and kids[b] == 0


@numba.njit
def _sift_up(heap, i):  # type: ignore[no-untyped-def]
    key, b = heap[i, 0], heap[i, 1]
    while i > 0:
        up = (i - 1) >> 1
        if heap[up, 0] <= key:
            break
        heap[i, 0], heap[i, 1] = heap[up, 0], heap[up, 1]
        i = up
    heap[i, 0], heap[i, 1] = key, b


@numba.njit
def _sift_down(heap, i, size):  # type: ignore[no-untyped-def]
    key, b = heap[i, 0], heap[i, 1]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and heap[c + 1, 0] < heap[c, 0]:
            c += 1
        if heap[c, 0] >= key:
            break
        heap[i, 0], heap[i, 1] = heap[c, 0], heap[c, 1]
        i = c
    heap[i, 0], heap[i, 1] = key, b


@numba.njit
def _compact(heap, size, node, kids):  # type: ignore[no-untyped-def]
    """Keep one entry per live leaf (a leaf can hold two: from before it gained a child and from
    after it lost it), then heapify; returns the new size, at most the number of leaves."""
    kept = 0
    for i in range(size):
        key, b = heap[i, 0], heap[i, 1]
        if _live(node, kids, key, b):
            kids[b] = -1  # seen: a second entry of b is no longer live
            heap[kept, 0], heap[kept, 1] = key, b
            kept += 1
    for i in range(kept):
        kids[heap[i, 1]] = 0
    for i in range(kept // 2 - 1, -1, -1):
        _sift_down(heap, i, kept)
    return kept


@numba.njit(inline="always")
def _push(heap, size, node, kids, key, b):  # type: ignore[no-untyped-def]
    if size == heap.shape[0]:
        size = _compact(heap, size, node, kids)
    heap[size, 0], heap[size, 1] = key, b
    _sift_up(heap, size)
    return size + 1


def belady(offsets, blocks, tenants, parent, next_use, n_unique, capacity, track_owner, owner):  # type: ignore[no-untyped-def]
    """Belady (offline): among cached blocks with no cached child (the leaves), evict the one
    whose next use is furthest away (never: furthest of all), ties by least recent touch.

    ``next_use``: ``Trace.next_use``, computed once per trace and shared by its replays (and by
    forked workers); ``owner``: per block, the tenant that cached it (``rows.owners``).

    Per block, its key (``node``, 0: not cached) and its count of cached children (``kids``), in
    two arrays: 12 bytes a block, where one 16-byte row [key, children] held both. On the
    generated week (158 M distinct blocks) a replay so holds 1.90 GB of them, not 2.53 GB; on
    the ×20 trace it took 0.88–1.04× the row's time in three side-by-side runs
    (``benchmarks/policy_speed.py --against``; benchmarks/RESULTS.md, "Stop 71"). The arrays are
    allocated by numpy, not in the compiled loop (huge pages, as for ``lru_plain``)."""
    n = offsets.size - 1
    if blocks.size >= 2**32 - 1 or n >= 2**31 - 1:  # touch numbers and next uses: 32 bits
        raise ValueError("a trace of 2**32 block lookups or 2**31 requests or more: split it")
    longest = int(np.diff(offsets).max()) if n else 0
    leaves = min(n_unique, capacity + longest) + 1  # the leaves are cached blocks
    return _belady_loop(
        offsets,
        blocks,
        tenants,
        parent,
        next_use,
        capacity,
        track_owner,
        np.zeros(n_unique, np.int64),
        np.zeros(n_unique, np.int32),
        np.empty((2 * leaves + 16, 2), np.int64),  # compacted when full: amortized O(1)
        owner,
        np.zeros(n, np.int32),
        np.zeros(blocks.size if track_owner else 0, np.bool_),  # empty: no other tenant
    )


@numba.njit(cache=True, nogil=True)
def _belady_loop(
    offsets,
    blocks,
    tenants,
    parent,
    next_use,
    capacity,
    track_owner,
    node,
    kids,
    heap,
    owner,
    hits,
    cross,
):  # type: ignore[no-untyped-def]
    n = offsets.size - 1
    size = 0  # cached blocks
    entries = 0  # heap entries, live or not
    clock = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        tenant = tenants[r]
        k = 0
        while start + k < end and node[blocks[start + k]] != 0:
            if track_owner:
                cross[start + k] = owner[blocks[start + k]] != tenant
            k += 1
        hits[r] = k
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            clock += 1
            key = (np.int64(n - next_use[p]) << 32) | clock
            cached = node[b] != 0
            node[b] = key  # a leaf's older entry is no longer live
            if not cached:
                size += 1
                if track_owner:
                    owner[b] = tenant
                q = parent[b]
                if q != NONE:
                    kids[q] += 1  # the parent's entry, if any, is no longer live
            if kids[b] == 0:
                entries = _push(heap, entries, node, kids, key, b)
        while size > capacity:
            key, v = heap[0, 0], heap[0, 1]
            if not _live(node, kids, key, v):
                entries -= 1
                heap[0, 0], heap[0, 1] = heap[entries, 0], heap[entries, 1]
                _sift_down(heap, 0, entries)
                continue
            node[v] = 0
            size -= 1
            q = parent[v]
            if q != NONE:
                kids[q] -= 1
            if q != NONE and kids[q] == 0 and node[q] != 0:
                # The parent becomes a leaf and takes the victim's place at the root: one sift
                # instead of a pop and a push (a chain's tail is often evicted block by block).
                heap[0, 0], heap[0, 1] = node[q], q
            else:
                entries -= 1
                heap[0, 0], heap[0, 1] = heap[entries, 0], heap[entries, 1]
            _sift_down(heap, 0, entries)
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at

"""The compiled replay loops over an indexed heap (lfu, belady, s3fifo). They follow the
request cycle of ``_lists.py``, and return the same triple."""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.policies._lists import NONE, _lookup, _push_back, _unlink

# --- an indexed binary min-heap over dense ids, ordered by (key1, key2) -----------------------


@numba.njit(inline="always")
def _less(k1, k2, a, b):  # type: ignore[no-untyped-def]
    return k1[a] < k1[b] or (k1[a] == k1[b] and k2[a] < k2[b])


@numba.njit(inline="always")
def _swap(heap, where, i, j):  # type: ignore[no-untyped-def]
    a, b = heap[i], heap[j]
    heap[i], heap[j] = b, a
    where[b], where[a] = i, j


@numba.njit
def _sift_up(heap, where, k1, k2, i):  # type: ignore[no-untyped-def]
    while i > 0:
        parent = (i - 1) // 2
        if not _less(k1, k2, heap[i], heap[parent]):
            break
        _swap(heap, where, i, parent)
        i = parent


@numba.njit
def _sift_down(heap, where, k1, k2, i, size):  # type: ignore[no-untyped-def]
    while True:
        smallest = i
        left, right = 2 * i + 1, 2 * i + 2
        if left < size and _less(k1, k2, heap[left], heap[smallest]):
            smallest = left
        if right < size and _less(k1, k2, heap[right], heap[smallest]):
            smallest = right
        if smallest == i:
            return
        _swap(heap, where, i, smallest)
        i = smallest


@numba.njit
def _heap_push(heap, where, k1, k2, size, b):  # type: ignore[no-untyped-def]
    heap[size] = b
    where[b] = size
    _sift_up(heap, where, k1, k2, size)
    return size + 1


@numba.njit
def _heap_remove(heap, where, k1, k2, size, b):  # type: ignore[no-untyped-def]
    i = where[b]
    size -= 1
    if i != size:
        _swap(heap, where, i, size)
        moved = heap[i]
        _sift_up(heap, where, k1, k2, i)
        _sift_down(heap, where, k1, k2, where[moved], size)
    where[b] = NONE
    return size


@numba.njit
def _heap_update(heap, where, k1, k2, size, b):  # type: ignore[no-untyped-def]
    _sift_up(heap, where, k1, k2, where[b])
    _sift_down(heap, where, k1, k2, where[b], size)


@numba.njit(cache=True, nogil=True)
def belady(offsets, blocks, tenants, parent, next_use, n_unique, capacity):  # type: ignore[no-untyped-def]
    """Belady (offline): among cached blocks with no cached child, evict the one whose next use
    is furthest away (never: furthest of all), ties by least recent touch.
    ``next_use[p]`` is the next request that looks up the block at lookup ``p``."""
    cached = np.zeros(n_unique, np.bool_)
    owner = np.zeros(n_unique, np.int32)
    children = np.zeros(n_unique, np.int32)
    far = np.zeros(n_unique, np.int64)  # minus the next use: the heap's first key
    seq = np.zeros(n_unique, np.int64)
    heap = np.empty(n_unique, np.int32)
    where = np.full(n_unique, NONE, np.int64)
    n = offsets.size - 1
    hits = np.zeros(n, np.int32)
    cross = np.zeros(blocks.size, np.bool_)
    size = 0  # cached blocks
    leaves = 0  # heap size
    clock = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        hits[r] = _lookup(blocks, start, end, cached, owner, tenants[r], cross)
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            clock += 1
            seq[b] = clock
            far[b] = -next_use[p]
            if cached[b]:
                if where[b] != NONE:
                    _heap_update(heap, where, far, seq, leaves, b)
                continue
            cached[b] = True
            owner[b] = tenants[r]
            size += 1
            q = parent[b]
            if q != NONE:
                children[q] += 1
                if where[q] != NONE:  # its parent is no longer a leaf
                    leaves = _heap_remove(heap, where, far, seq, leaves, q)
            if children[b] == 0:
                leaves = _heap_push(heap, where, far, seq, leaves, b)
        while size > capacity:
            v = heap[0]
            leaves = _heap_remove(heap, where, far, seq, leaves, v)
            cached[v] = False
            size -= 1
            q = parent[v]
            if q != NONE:
                children[q] -= 1
                if children[q] == 0 and cached[q]:
                    leaves = _heap_push(heap, where, far, seq, leaves, q)
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at


# --- S3-FIFO: small FIFO S, main FIFO M, ghost FIFO G (ids only), one linked list each --------

S_QUEUE, M_QUEUE, G_QUEUE = 1, 2, 3


@numba.njit(cache=True, nogil=True)
def s3fifo(offsets, blocks, tenants, parent, n_unique, capacity):  # type: ignore[no-untyped-def]
    """S3-FIFO (SOSP'23), kept prefix-closed: a block with cached children is in use by them and
    is never evicted; at the head of its queue it moves to M's tail. See docs/simulation.md."""
    small_cap = max(1, capacity // 10)
    ghost_cap = max(1, capacity - small_cap)
    sen_s, sen_m, sen_g = n_unique, n_unique + 1, n_unique + 2
    nxt = np.empty(n_unique + 3, np.int32)
    prv = np.empty(n_unique + 3, np.int32)
    for q in (sen_s, sen_m, sen_g):
        nxt[q] = q
        prv[q] = q
    queue = np.zeros(n_unique, np.int8)
    freq = np.zeros(n_unique, np.int8)
    children = np.zeros(n_unique, np.int32)
    owner = np.zeros(n_unique, np.int32)
    cached = np.zeros(n_unique, np.bool_)
    n_small = 0
    n_main = 0
    n_ghost = 0
    n = offsets.size - 1
    hits = np.zeros(n, np.int32)
    cross = np.zeros(blocks.size, np.bool_)
    size = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        hits[r] = _lookup(blocks, start, end, cached, owner, tenants[r], cross)
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            if cached[b]:
                if freq[b] < 3:
                    freq[b] += 1
                continue
            cached[b] = True
            owner[b] = tenants[r]
            freq[b] = 0
            size += 1
            if parent[b] != NONE:
                children[parent[b]] += 1
            if queue[b] == G_QUEUE:  # remembered: straight to M
                _unlink(nxt, prv, b)
                n_ghost -= 1
                queue[b] = M_QUEUE
                n_main += 1
                _push_back(nxt, prv, sen_m, b)
            else:
                queue[b] = S_QUEUE
                n_small += 1
                _push_back(nxt, prv, sen_s, b)
        while size > capacity:
            evicted = NONE
            if n_small >= small_cap:
                # S: a block in use by its children, or seen again, moves to M; the first
                # other one leaves and is remembered in G.
                passes = n_small
                while passes > 0 and nxt[sen_s] != sen_s:
                    passes -= 1
                    v = nxt[sen_s]
                    _unlink(nxt, prv, v)
                    n_small -= 1
                    if children[v] > 0 or freq[v] > 1:
                        queue[v] = M_QUEUE
                        n_main += 1
                        _push_back(nxt, prv, sen_m, v)
                        continue
                    queue[v] = G_QUEUE
                    n_ghost += 1
                    _push_back(nxt, prv, sen_g, v)
                    if n_ghost > ghost_cap:
                        g = nxt[sen_g]
                        _unlink(nxt, prv, g)
                        queue[g] = 0
                        n_ghost -= 1
                    evicted = v
                    break
            if evicted == NONE:
                # M: a block in use goes round; a block with count > 0 goes round with one less;
                # the first other one leaves. Each block goes round at most 4 times a call.
                passes = 4 * n_main + 1
                while passes > 0 and nxt[sen_m] != sen_m:
                    passes -= 1
                    v = nxt[sen_m]
                    _unlink(nxt, prv, v)
                    if children[v] > 0 or freq[v] > 0:
                        if children[v] == 0:
                            freq[v] -= 1
                        _push_back(nxt, prv, sen_m, v)
                        continue
                    queue[v] = 0
                    n_main -= 1
                    evicted = v
                    break
            if evicted == NONE:
                continue  # S handed its blocks to M: M gives a victim on the next round
            cached[evicted] = False
            size -= 1
            if parent[evicted] != NONE:
                children[parent[evicted]] -= 1
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at

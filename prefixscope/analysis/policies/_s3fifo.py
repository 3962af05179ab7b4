"""The compiled S3-FIFO loop: a small FIFO S, a main FIFO M and a ghost FIFO G (ids only), one
linked list each over dense ids. It follows the request cycle of ``_lists.py`` and returns the
same triple. Semantics: ``others.py`` and docs/simulation.md.

Termination: the cache is prefix-closed (a block with a cached child is never evicted, and a
request touches its whole chain), so while it holds anything it holds a leaf. An eviction round
asks S (when it holds its share), then M, then S whatever its share; a pass over S moves every
block it passes over to M, and a pass over M visits each block up to four times, so a leaf's
count (at most 3) reaches 0 within one pass. So every round that finds no victim has moved a
leaf towards M's evictable state, and a victim is found within two rounds.
"""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.policies._lists import NONE, _lookup, _push_back, _unlink

S_QUEUE, M_QUEUE, G_QUEUE = 1, 2, 3


@numba.njit(cache=True)
def _from_small(nxt, prv, queue, freq, children, sen_s, sen_m, sen_g, counts, ghost_cap):  # type: ignore[no-untyped-def]
    """S's victim, or NONE: a block in use by its children, or seen again, moves to M; the
    first other one leaves and is remembered in G. ``counts``: [n_small, n_main, n_ghost]."""
    passes = counts[0]
    while passes > 0 and nxt[sen_s] != sen_s:
        passes -= 1
        v = nxt[sen_s]
        _unlink(nxt, prv, v)
        counts[0] -= 1
        if children[v] > 0 or freq[v] > 1:
            queue[v] = M_QUEUE
            counts[1] += 1
            _push_back(nxt, prv, sen_m, v)
            continue
        queue[v] = G_QUEUE
        counts[2] += 1
        _push_back(nxt, prv, sen_g, v)
        if counts[2] > ghost_cap:
            g = nxt[sen_g]
            _unlink(nxt, prv, g)
            queue[g] = 0
            counts[2] -= 1
        return v
    return NONE


@numba.njit(cache=True)
def _from_main(nxt, prv, queue, freq, children, sen_m, counts):  # type: ignore[no-untyped-def]
    """M's victim, or NONE: a block in use goes round; a block with count > 0 goes round with
    one less; the first other one leaves. Each block goes round at most 4 times a call."""
    passes = 4 * counts[1] + 1
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
        counts[1] -= 1
        return v
    return NONE


@numba.njit(cache=True, nogil=True)
def s3fifo(offsets, blocks, tenants, parent, n_unique, capacity):  # type: ignore[no-untyped-def]
    """S3-FIFO (SOSP'23), kept prefix-closed: a block with cached children is in use by them and
    is never evicted; at the head of its queue it moves to M's tail."""
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
    counts = np.zeros(3, np.int64)  # blocks in S, M and G
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
                counts[2] -= 1
                queue[b] = M_QUEUE
                counts[1] += 1
                _push_back(nxt, prv, sen_m, b)
            else:
                queue[b] = S_QUEUE
                counts[0] += 1
                _push_back(nxt, prv, sen_s, b)
        while size > capacity:
            evicted = NONE
            if counts[0] >= small_cap:
                evicted = _from_small(
                    nxt, prv, queue, freq, children, sen_s, sen_m, sen_g, counts, ghost_cap
                )
            if evicted == NONE:
                evicted = _from_main(nxt, prv, queue, freq, children, sen_m, counts)
            if evicted == NONE:  # M has only blocks in use: S gives one, whatever its share
                evicted = _from_small(
                    nxt, prv, queue, freq, children, sen_s, sen_m, sen_g, counts, ghost_cap
                )
            if evicted == NONE:
                continue  # S handed its blocks to M: M gives a victim on the next round
            cached[evicted] = False
            size -= 1
            if parent[evicted] != NONE:
                children[parent[evicted]] -= 1
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at

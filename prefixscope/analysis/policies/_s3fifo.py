"""The compiled S3-FIFO loop: a small FIFO S, a main FIFO M and a ghost FIFO G (ids only), one
linked list each over dense ids. It follows the request cycle of ``_lists.py`` and returns the
same triple. Semantics: ``others.py`` and docs/simulation.md.

Termination: the cache is prefix-closed (a block with a cached child is never evicted, and a
request touches its whole chain), so while it holds anything it holds a leaf. An eviction round
asks S (when it holds its share), then M, then S whatever its share; a pass over S moves every
block it passes over to M, and a pass over M visits each block up to four times, so a leaf's
count (at most 3) reaches 0 within one pass. So every round that finds no victim has moved a
leaf towards M's evictable state, and a victim is found within two rounds.

State: one 16-byte row per block, [next, prev, cached children, owner << 4 | count << 2 |
queue], so a touch reads and writes one cache line of its own (its parent's when it is
inserted or leaves); the three queues' sentinels are rows after the blocks', each counting its
queue's blocks. A block is cached exactly when its queue is S or M. All-zero rows are an empty
cache once the sentinels link to themselves (:func:`empty_rows`).
"""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.policies._lists import NONE, _node_push_back, _node_unlink

S_QUEUE, M_QUEUE, G_QUEUE = 1, 2, 3
NEXT, PREV, CHILDREN, META = 0, 1, 2, 3
QUEUE_BITS = 3  # META's low two bits: the queue (0: none)
COUNT_ONE = 4  # META's next two bits: the count, 0 to 3
OWNER_SHIFT = 4  # the rest: the tenant that inserted the block


def s3fifo(offsets, blocks, tenants, parent, n_unique, capacity):  # type: ignore[no-untyped-def]
    """S3-FIFO (SOSP'23), kept prefix-closed: a block with cached children is in use by them and
    is never evicted; at the head of its queue it moves to M's tail."""
    if tenants.size and int(tenants.max()) >= 2 ** (31 - OWNER_SHIFT):
        raise ValueError("s3fifo keeps a tenant code in 27 bits: too many tenants")
    hits = np.zeros(offsets.size - 1, np.int32)
    cross = np.zeros(blocks.size, np.bool_)
    node = empty_rows(n_unique)
    filled_at = _s3fifo_loop(
        offsets, blocks, tenants, parent, n_unique, capacity, node, hits, cross
    )
    return hits, cross, filled_at


def empty_rows(n_unique: int, caches: int = 1) -> np.ndarray:
    """The rows of ``caches`` empty caches, one after another, ``n_unique + 3`` each."""
    node = np.zeros((caches * (n_unique + 3), 4), np.int32)
    sentinels = (np.arange(caches, dtype=np.int32) * (n_unique + 3) + n_unique)[:, None]
    sentinels = (sentinels + np.arange(3, dtype=np.int32)).ravel()
    node[sentinels, NEXT] = sentinels
    node[sentinels, PREV] = sentinels
    return node


@numba.njit(inline="always")
def _requeue(node, v, meta, queue, sentinel):  # type: ignore[no-untyped-def]
    node[v, META] = (meta & ~QUEUE_BITS) | queue
    _node_push_back(node, sentinel, v)


# The per-request operations, over one cache's rows: block ``b`` at row ``base + b``, and the
# sentinels of S, M and G at ``sen``, ``sen + 1``, ``sen + 2``, whose CHILDREN column counts the
# queue's blocks. The single cache's loop calls them with ``base = 0``; the fleet with each
# replica's own rows (``fleet/_policy_cache.py``).


@numba.njit(inline="always")
def s3fifo_touch(node, base, sen, parent, b, tenant):  # type: ignore[no-untyped-def]
    """Block ``b`` touched: a cached one counts a use (up to 3); a new one enters S, or M when G
    remembers it. Returns 1 when it was inserted."""
    v = base + b
    meta = node[v, META]
    queue = meta & QUEUE_BITS
    if 0 < queue < G_QUEUE:  # cached: in S or M
        if (meta >> 2) & 3 < 3:
            node[v, META] = meta + COUNT_ONE
        return 0
    if parent[b] != NONE:
        node[base + parent[b], CHILDREN] += 1
    fresh = tenant << OWNER_SHIFT  # count 0
    if queue == G_QUEUE:  # remembered: straight to M
        _node_unlink(node, v)
        node[sen + 2, CHILDREN] -= 1
        node[sen + 1, CHILDREN] += 1
        _requeue(node, v, fresh, M_QUEUE, sen + 1)
    else:
        node[sen, CHILDREN] += 1
        _requeue(node, v, fresh, S_QUEUE, sen)
    return 1


@numba.njit(inline="always")
def s3fifo_evict(node, base, sen, parent, small_cap, ghost_cap):  # type: ignore[no-untyped-def]
    """One eviction round: the victim (its block id), or NONE when S only handed its blocks to
    M (then M gives a victim on the next round)."""
    v = NONE
    if node[sen, CHILDREN] >= small_cap:
        v = _from_small(node, sen, ghost_cap)
    if v == NONE:
        v = _from_main(node, sen + 1)
    if v == NONE:  # M has only blocks in use: S gives one, whatever its share
        v = _from_small(node, sen, ghost_cap)
    if v == NONE:
        return NONE
    b = v - base
    if parent[b] != NONE:
        node[base + parent[b], CHILDREN] -= 1
    return b


@numba.njit(inline="always")
def _from_small(node, sen_s, ghost_cap):  # type: ignore[no-untyped-def]
    """S's victim, or NONE: a block in use by its children, or seen again, moves to M; the
    first other one leaves and is remembered in G."""
    sen_m, sen_g = sen_s + 1, sen_s + 2
    passes = node[sen_s, CHILDREN]
    while passes > 0 and node[sen_s, NEXT] != sen_s:
        passes -= 1
        v = node[sen_s, NEXT]
        _node_unlink(node, v)
        node[sen_s, CHILDREN] -= 1
        meta = node[v, META]
        if node[v, CHILDREN] > 0 or (meta >> 2) & 3 > 1:
            node[sen_m, CHILDREN] += 1
            _requeue(node, v, meta, M_QUEUE, sen_m)
            continue
        node[sen_g, CHILDREN] += 1
        _requeue(node, v, meta, G_QUEUE, sen_g)
        if node[sen_g, CHILDREN] > ghost_cap:
            g = node[sen_g, NEXT]
            _node_unlink(node, g)
            node[g, META] &= ~QUEUE_BITS
            node[sen_g, CHILDREN] -= 1
        return v
    return NONE


@numba.njit(inline="always")
def _from_main(node, sen_m):  # type: ignore[no-untyped-def]
    """M's victim, or NONE: a block in use goes round; a block with count > 0 goes round with
    one less; the first other one leaves. Each block goes round at most 4 times a call."""
    passes = 4 * node[sen_m, CHILDREN] + 1
    while passes > 0 and node[sen_m, NEXT] != sen_m:
        passes -= 1
        v = node[sen_m, NEXT]
        _node_unlink(node, v)
        meta = node[v, META]
        in_use = node[v, CHILDREN] > 0
        if in_use or (meta >> 2) & 3 > 0:
            if not in_use:
                meta -= COUNT_ONE
            node[v, META] = meta
            _node_push_back(node, sen_m, v)
            continue
        node[v, META] = meta & ~QUEUE_BITS
        node[sen_m, CHILDREN] -= 1
        return v
    return NONE


# Compiled without reference counting: the operations are inlined with their arrays, and
# counting those on each call cost the loop 20-40% (measured on the x20 trace).
@numba.njit(cache=True, nogil=True, _nrt=False)
def _s3fifo_loop(offsets, blocks, tenants, parent, n_unique, capacity, node, hits, cross):  # type: ignore[no-untyped-def]
    small_cap = max(1, capacity // 10)
    ghost_cap = max(1, capacity - small_cap)
    sen = n_unique
    n = offsets.size - 1
    size = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        tenant = tenants[r]
        k = 0
        while start + k < end:
            meta = node[blocks[start + k], META]
            if not 0 < meta & QUEUE_BITS < G_QUEUE:  # cached: in S or M
                break
            cross[start + k] = (meta >> OWNER_SHIFT) != tenant
            k += 1
        hits[r] = k
        for p in range(end - 1, start - 1, -1):
            size += s3fifo_touch(node, 0, sen, parent, blocks[p], tenant)
        while size > capacity:
            if s3fifo_evict(node, 0, sen, parent, small_cap, ghost_cap) != NONE:
                size -= 1
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return filled_at

"""``s3fifo``: S3-FIFO (Yang et al., SOSP'23): a small FIFO S (10% of the capacity), a main
FIFO M and a ghost FIFO G of evicted ids (as many as M holds). New blocks enter S, or M when G
remembers them; a hit raises the block's count, up to 3. Evicting from S (when S holds at
least its share): a block with count > 1 moves to M, else it leaves and is remembered in G.
Evicting from M: a block with count > 0 goes back to M's tail with count - 1, else it leaves.
Kept prefix-closed: only blocks without cached children are evicted or moved; the others are
passed over where they stand (a queue without such a block hands the eviction to the other).

Termination: the cache is prefix-closed (a block with a cached child is never evicted, and a
request touches its whole chain), so while it holds anything it holds a leaf. An eviction round
asks S (when it holds its share), then M, then S whatever its share; a pass over S moves every
block it passes over to M, and a pass over M visits each block up to four times, so a leaf's
count (at most 3) reaches 0 within one pass. So every round that finds no victim has moved a
leaf towards M's evictable state, and a victim is found within two rounds.

Rows (``rows.py``): one 16-byte row per block, [next, prev, cached children, owner << 4 |
count << 2 | queue], so a touch reads and writes one cache line of its own (its parent's when
it is inserted or leaves); the three queues' sentinels are rows after the blocks', each
counting its queue's blocks. A block is cached exactly when its queue is S or M.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba

from prefixscope.analysis.policies.rows import (
    NONE,
    RowOps,
    RowPolicy,
    node_push_back,
    node_unlink,
    operation,
)
from prefixscope.analysis.trace.csr import Trace

S_QUEUE, M_QUEUE, G_QUEUE = 1, 2, 3
NEXT, PREV, CHILDREN, META = 0, 1, 2, 3
QUEUE_BITS = 3  # META's low two bits: the queue (0: none)
COUNT_ONE = 4  # META's next two bits: the count, 0 to 3
OWNER_SHIFT = 4  # the rest: the tenant that inserted the block


@numba.njit(inline="always")
def _requeue(node, v, meta, queue, sentinel):  # type: ignore[no-untyped-def]
    node[v, META] = (meta & ~QUEUE_BITS) | queue
    node_push_back(node, sentinel, v)


# The operations (``rows.py``): the sentinels of S, M and G are at ``sen``, ``sen + 1``,
# ``sen + 2``, and their CHILDREN column counts the queue's blocks; ``order`` is unused.


@operation
def touch(node, order, parent, base, sen, ob, top, b, tenant):  # type: ignore[no-untyped-def]
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
        node_unlink(node, v)
        node[sen + 2, CHILDREN] -= 1
        node[sen + 1, CHILDREN] += 1
        _requeue(node, v, fresh, M_QUEUE, sen + 1)
    else:
        node[sen, CHILDREN] += 1
        _requeue(node, v, fresh, S_QUEUE, sen)
    return 1


@operation
def evict(node, order, parent, base, sen, ob, top, capacity):  # type: ignore[no-untyped-def]
    """One eviction round: the victim (its block id), or NONE when S only handed its blocks to
    M (then M gives a victim on the next round). S's share is a tenth of the capacity, G's the
    rest."""
    small_cap = max(1, capacity // 10)
    ghost_cap = max(1, capacity - small_cap)
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
        node_unlink(node, v)
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
            node_unlink(node, g)
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
        node_unlink(node, v)
        meta = node[v, META]
        in_use = node[v, CHILDREN] > 0
        if in_use or (meta >> 2) & 3 > 0:
            if not in_use:
                meta -= COUNT_ONE
            node[v, META] = meta
            node_push_back(node, sen_m, v)
            continue
        node[v, META] = meta & ~QUEUE_BITS
        node[sen_m, CHILDREN] -= 1
        return v
    return NONE


@operation
def cached(node, v):  # type: ignore[no-untyped-def]
    return 0 < node[v, META] & QUEUE_BITS < G_QUEUE  # in S or M


@operation
def owner(node, v):  # type: ignore[no-untyped-def]
    return node[v, META] >> OWNER_SHIFT


@dataclass(frozen=True)
class S3FIFO(RowPolicy):
    name: str = "s3fifo"
    label: str = "S3-FIFO"
    needs_parent = True
    ops = RowOps(touch, evict, cached, owner, always=False)  # a round may only move blocks

    def shape(self, trace: Trace) -> tuple[int, int]:
        """The sentinels of S, M and G; no order. Every cache's rows are shaped here, so the
        check of the owners' room comes first."""
        if trace.tenant_codes.size and int(trace.tenant_codes.max()) >= 2 ** (31 - OWNER_SHIFT):
            raise ValueError("s3fifo keeps a tenant code in 27 bits: too many tenants")
        return 3, 1

"""``lfu``: evict the block with the fewest uses while cached (a use: a request that touches it
while it is cached), ties by least recent touch (deepest first within a request). A child is
never used without its parent, so the cache stays prefix-closed.

The O(1) LFU of Shah, Mitra and Matani (2010): the cached blocks of each use count ``f`` form
one list (bucket ``f``), in touch order, and the non-empty buckets form a list in count order,
so the victim is the head of the first bucket. A touch moves a block from bucket ``f`` to the
tail of bucket ``f + 1``, so every bucket stays ordered by last touch: its head is the least
recent block of its count. A count never exceeds the block's lookups, which bounds the buckets.

Rows (``rows.py``), per cache: one per block, then one sentinel per bucket, each [next, prev,
uses + 1 (0: not cached), owner], 16 bytes, so a touch reads and writes one cache line of the
block's own; ``order`` is the list of non-empty buckets, a row per count and its sentinel last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies.rows import (
    RowOps,
    RowPolicy,
    cached,
    node_insert_after,
    node_push_back,
    node_unlink,
    operation,
    owner,
)
from prefixscope.analysis.trace.csr import Trace


@operation
def touch(node, order, parent, base, sen, ob, top, b, tenant):  # type: ignore[no-untyped-def]
    """A cached block moves from bucket ``f`` to the tail of ``f + 1``; a new one enters
    bucket 0 at its tail."""
    v = base + b
    u = node[v, 2]  # uses + 1; 0: not cached
    inserted = 0
    if u > 0:  # a use: from bucket f = u - 1 to the tail of bucket u
        f = u - 1
        node_unlink(node, v)
        if node[sen + u, 0] == sen + u:
            node_insert_after(order, ob + f, ob + u)
        node_push_back(node, sen + u, v)
        node[v, 2] = u + 1
        if node[sen + f, 0] == sen + f:
            node_unlink(order, ob + f)
    else:
        if node[sen, 0] == sen:
            node_insert_after(order, top, ob)
        node_push_back(node, sen, v)
        node[v, 2] = 1
        node[v, 3] = tenant
        inserted = 1
    return inserted


@operation
def evict(node, order, parent, base, sen, ob, top, capacity):  # type: ignore[no-untyped-def]
    """The head of the first non-empty bucket: the least recently touched block of the fewest
    uses. Always a victim: the cache holds a block."""
    f = order[top, 0] - ob
    v = node[sen + f, 0]
    node_unlink(node, v)
    node[v, 2] = 0
    if node[sen + f, 0] == sen + f:
        node_unlink(order, ob + f)
    return v - base


def buckets(blocks: np.ndarray) -> int:
    """The use counts a trace can reach, 0 included: its most looked-up block's lookups + 1."""
    return int(np.bincount(blocks).max()) + 1 if blocks.size else 1


@dataclass(frozen=True)
class LFU(RowPolicy):
    name: str = "lfu"
    label: str = "LFU"
    ops = RowOps(touch, evict, cached, owner)

    def shape(self, trace: Trace) -> tuple[int, int]:
        n = buckets(trace.blocks)
        return n, n + 1  # a sentinel per bucket; a row per bucket in the order, and its own

"""The ``ideal`` engine's caches under ``lfu`` and ``s3fifo``.

Under ``lfu`` and ``s3fifo`` each replica keeps its own rows of the policy's state
(``Sets.pnode``, and ``Sets.porder`` for LFU's order of buckets), touched and evicted by the
policy's own operations, the ones ``simulate``'s loops call (``policies/_lists.py``
``lfu_touch``/``lfu_evict``, ``policies/_s3fifo.py`` ``s3fifo_touch``/``s3fifo_evict``). So one
replica equals ``simulate`` by construction, and a stateful router runs them as it runs
``lru``. ``pinned`` (a ``--pin`` file's prefixes, the same on every replica) is ``lru``'s own
list and touch (``_cache.insert``, ``_sets._touch``), its pins kept off the list.

Invariant: bit ``i`` of ``held[b]`` is set exactly when replica ``i``'s policy caches ``b``;
every insert and eviction below keeps it (and the stale view's log), so lookups, routers and
the miss budget read the masks as under ``lru``.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import LFU, NONE, piece
from prefixscope.analysis.fleet._sets import _bit
from prefixscope.analysis.fleet._stale import logged, note
from prefixscope.analysis.policies._lists import lfu_evict, lfu_touch
from prefixscope.analysis.policies._s3fifo import s3fifo_evict, s3fifo_touch


@piece
def touch_and_evict(r, i, blocks, start, end, parent, sched, sets, rep):  # type: ignore[no-untyped-def]
    """Request ``r``'s blocks touched in replica ``i``'s cache, deepest first, then its victims
    evicted while it holds more than its capacity."""
    n_rep = rep.now.size
    rows = sets.pnode.shape[0] // n_rep
    base = i * rows
    sen = base + sets.held.size  # the first sentinel row, after the blocks'
    span = sets.porder.shape[0] // n_rep
    ob = i * span
    top = ob + span - 1
    lfu = sched.policy == LFU
    bit = _bit(i)
    log = logged(sets)
    for p in range(end - 1, start - 1, -1):
        b = blocks[p]
        if lfu:
            added = lfu_touch(sets.pnode, sets.porder, base, sen, ob, top, b, 0)
        else:
            added = s3fifo_touch(sets.pnode, base, sen, parent, b, 0)
        if added:
            sets.held[b] |= bit
            rep.size[i] += 1
            if log:
                note(sets, i, b, True)
    cap = sched.capacity
    small = max(1, cap // 10)
    ghost = max(1, cap - small)
    while rep.size[i] > cap:
        if lfu:
            v = lfu_evict(sets.pnode, sets.porder, base, sen, ob, top)
        else:
            v = s3fifo_evict(sets.pnode, base, sen, parent, small, ghost)
            if v == NONE:
                continue  # S handed its blocks to M: M gives a victim on the next round
        sets.held[v] &= ~bit
        rep.size[i] -= 1
        if log:
            note(sets, i, v, False)
    if rep.filled_at[i] < 0 and rep.size[i] >= cap:
        rep.filled_at[i] = r

"""The ``ideal`` engine's caches under a row policy (``policies/rows.py``: ``lfu``, ``s3fifo``).

Each replica keeps its own rows of the policy's state (``Sets.pnode``, and ``Sets.porder``,
the policy's own order), touched and evicted by the policy's own operations, the ones
``simulate``'s loop inlines, called here over a request through function values
(``Sets.touch``, ``Sets.evict``; ``policies/_row_loops.py``), so the loop is compiled once for
every row policy. So one replica equals
``simulate`` by construction, and a stateful router runs them as it runs ``lru``. ``pinned``
(a ``--pin`` file's prefixes, the same on every replica) is ``lru``'s own list and touch
(``_cache.insert``, ``_sets._touch``), its pins kept off the list.

Invariant: bit ``i`` of ``held[b]`` is set exactly when replica ``i``'s policy caches ``b``;
every insert and eviction below keeps it (and the stale view's log), so lookups, routers and
the miss budget read the masks as under ``lru``.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import piece
from prefixscope.analysis.fleet._sets import _bit
from prefixscope.analysis.fleet._stale import logged, note


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
    bit = _bit(i)
    log = logged(sets)
    cap = sched.capacity
    out = sets.pout
    n = sets.touch(sets.pnode, sets.porder, parent, base, sen, ob, top, blocks, start, end, 0, out)
    for j in range(n):  # inserted
        b = out[j]
        sets.held[b] |= bit
        if log:
            note(sets, i, b, True)
    rep.size[i] += n
    if rep.size[i] > cap:
        size = rep.size[i]
        n = sets.evict(sets.pnode, sets.porder, parent, base, sen, ob, top, cap, size, out)
        for j in range(n):  # evicted
            v = out[j]
            sets.held[v] &= ~bit
            if log:
                note(sets, i, v, False)
        rep.size[i] -= n
    if rep.filled_at[i] < 0 and rep.size[i] >= cap:
        rep.filled_at[i] = r

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

Tiers, as the list's (``_tiers.hbm_over_dram``, ``store_after``): the DRAM tier is exclusive, a
list in the order the policy evicted its blocks, its front leaving first; a request's blocks
it holds move up (the policy inserts them as new), and the policy's victims go to its back.
Then the store takes what was computed. So ``lru``'s rows with tiers are the list with tiers,
block for block (``tests/test_fleet.py``).
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import piece
from prefixscope.analysis.fleet._sets import _bit, _evict_to, _push_back, _unlink
from prefixscope.analysis.fleet._stale import logged, note
from prefixscope.analysis.fleet._tiers import store_after


@piece
def touch_and_evict(  # type: ignore[no-untyped-def]
    r, i, blocks, start, end, best, stride, parent, sched, tiers, sets, rep, scratch
):
    """Request ``r``'s blocks touched in replica ``i``'s cache, deepest first, then its victims
    evicted while it holds more than its capacity, into its DRAM tier where it has one (a list
    over the loop's nodes, ``stride`` a replica); then the store takes what was computed
    (``best``: the served run, ``scratch[0]`` its tiers)."""
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
    dram = tiers.dram_blocks > 0
    lb = i * stride
    ls = lb + stride - 1
    if dram:  # exclusive: what DRAM holds of the request moves up
        for p in range(start, end):
            b = blocks[p]
            if sets.dram_held[b] & bit:
                _unlink(sets.dnxt, sets.dprv, lb + b)
                sets.dram_held[b] &= ~bit
                rep.dsize[i] -= 1
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
            if dram:
                sets.dram_held[v] |= bit
                _push_back(sets.dnxt, sets.dprv, ls, lb + v)
        rep.size[i] -= n
        if dram:
            rep.dsize[i] += n
    if dram:
        dc = tiers.dram_blocks
        rep.dsize[i] = _evict_to(i, lb, ls, dc, rep.dsize[i], sets.dram_held, sets.dnxt, sets.dprv)
    if rep.filled_at[i] < 0 and rep.size[i] >= cap:
        rep.filled_at[i] = r
    store_after(blocks, start, end, best, scratch[0], sched.recency, tiers, sets, rep)

"""vLLM's second copies of a cached id, for the ``vllm`` pool (``_pool.py``).

vLLM never de-duplicates its cache (``BlockHashToBlockMap`` in
``block_pool.py``: "we don't de-duplicate the blocks in the cache"). Where a decode fills an
answer block under an id the replica holds already (the next turn, sent early, computed it
first), that block is a second copy of the id: a node past the replicas' own
(``Pool.dup_*``), held by that request alone, queued like any cached block once freed. No
lookup finds it while the first copy is cached (vLLM's lookup returns the first inserted);
when the first is evicted, the copy takes its place: node ``v`` moves to the copy's place in
the queue and its request now holds ``v``. One copy per id at most; a third stays hashless.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import NONE, piece


@piece
def _drop_copy(i, v, first, sets, pool):  # type: ignore[no-untyped-def]
    """Node ``v``, just taken from the queue's head, is a second copy (dropped) or a first
    copy whose second takes its place, in the queue or in the hands of its request."""
    if v >= first:
        w, v = v, pool.dup_owner[v - first]
    else:
        w = pool.dup_of[v]
        pool.refcnt[v] = pool.refcnt[w]
        if pool.refcnt[w] == 0:  # queued: v takes its place there
            p, nx = sets.prv[w], sets.nxt[w]
            sets.nxt[p] = v
            sets.prv[v] = p
            sets.nxt[v] = nx
            sets.prv[nx] = v
            pool.anon_before[v] = pool.anon_before[w]
        else:
            pool.ans_copy[pool.dup_pos[w - first]] = NONE
    pool.dup_of[v] = NONE
    pool.dup_owner[w - first] = NONE
    pool.dup_pos[w - first] = NONE
    slots = (pool.dup_owner.size - 1) // pool.dup_top.size
    pool.dup_stack[i * slots + pool.dup_top[i]] = w - first - i * slots
    pool.dup_top[i] += 1


@piece
def _copy(i, v, pos, stride, pool):  # type: ignore[no-untyped-def]
    """A second copy of node ``v`` for the request at answer position ``pos``; False where
    ``v`` has one already (or no slot is left: never, as each copy is a block)."""
    if pool.dup_owner.size <= 1 or pool.dup_of[v] != NONE or pool.dup_top[i] == 0:
        return False
    slots = (pool.dup_owner.size - 1) // pool.dup_top.size
    pool.dup_top[i] -= 1
    k = i * slots + pool.dup_stack[i * slots + pool.dup_top[i]]
    w = pool.free_n.size * stride + k
    pool.dup_of[v] = w
    pool.dup_owner[k] = v
    pool.dup_pos[k] = pos
    pool.refcnt[w] = 1
    pool.ans_copy[pos] = w
    return True

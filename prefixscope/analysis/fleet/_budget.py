"""The miss budget of one lookup (``budget.py`` names the parts): where each prompt token that
its replica did not serve went, from the fleet's state at the lookup.

Per block past the served run, the first rule that holds (``tok``: the block's tokens):

1. in the cached leading run, not served: the last block of a whole-prompt hit that the engine
   recomputes (``ALWAYS``), else a slower tier's block that was cheaper to recompute than to
   copy (``RECOMPUTED``);
2. the prompt's last block, when the engine recomputes it and every block was seen before:
   ``ALWAYS`` (no cache serves it, the unbounded one neither);
3. at or past the unbounded cache's run (``ceiling``): ``NEVER`` (with chained ids, never
   looked up by an earlier request: the workload's floor);
4. held by this replica (any tier) or the fleet's store: ``BEHIND`` an earlier miss (the
   leading-run rule);
5. held by another replica: ``STALE`` where it is the one a fresh view would have routed the
   request to (``--router-delay``: the router saw that cache as it was a while ago), else
   ``OTHER`` (routing);
6. cached somewhere before and dropped since: ``EVICTED`` (capacity, ttl);
7. looked up before but not cached yet (its first request still queued, pools): ``PENDING``.

Prompt tokens past the last block (a token source's unhashed tail) are ``ALWAYS``. So per
request ``hit + Σ parts = input tokens``, and where the fleet serves nothing the unbounded
cache would not, ``NEVER + ALWAYS`` is that cache's miss to the token.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import BUDGET_PARTS, HIT, piece
from prefixscope.analysis.fleet._sets import _bit

ALWAYS, NEVER, RECOMPUTED, BEHIND, OTHER, EVICTED, PENDING, STALE = range(BUDGET_PARTS)


@piece
def classify(r, i, blocks, start, end, inp, served_b, k, rl, kc, bs, sets, req):  # type: ignore[no-untyped-def]
    """Request ``r``'s unserved tokens on replica ``i`` into ``req.miss[r]``: ``served_b``
    blocks served of a cached leading run of ``k``; ``rl``: its engine recomputes a
    whole-block prompt's last block; ``kc``: the unbounded cache's leading run."""
    nb = end - start
    watched = req.why[0] == r  # its blocks' parts are kept, hits included
    if watched:
        for j in range(min(served_b, nb)):
            req.why[1 + j] = HIT
    bit = _bit(i)
    dram = sets.dram_held.size > 1
    store = sets.store_in.size > 1
    ever = sets.ever.size > 1
    fresh = req.fresh[r] if req.fresh.size > 1 else -1
    missed = fresh >= 0 and fresh != i  # a fresh view would have routed it elsewhere
    for j in range(served_b, nb):
        tok = min(max(inp - j * bs, 0), bs)
        if tok == 0:
            break
        last = rl and j == nb - 1
        if j < k:
            part = ALWAYS if last and k >= nb else RECOMPUTED
        elif last and kc >= nb:
            part = ALWAYS
        elif j >= kc:
            part = NEVER
        else:
            b = blocks[start + j]
            mine = (sets.held[b] & bit) != 0 or (dram and (sets.dram_held[b] & bit) != 0)
            others = (sets.held[b] & ~bit) != 0 or (dram and (sets.dram_held[b] & ~bit) != 0)
            if mine or (store and sets.store_in[b]):
                part = BEHIND
            elif others:
                part = STALE if missed and sets.held[b] & _bit(fresh) else OTHER
            elif not ever or sets.ever[b]:
                part = EVICTED
            else:
                part = PENDING
        req.miss[r, part] += tok
        if watched:
            req.why[1 + j] = part
    req.miss[r, ALWAYS] += max(inp - nb * bs, 0)

"""The ``ideal`` engine's cache: each replica's prefix cache apart from the memory its running
requests hold, looked up and touched when a request arrives, as ``simulate`` does
(``policies/_lists.py``: deepest block first, so it leaves first among equals; evict while over
capacity), with a DRAM tier below it and the fleet's store when there are such
(``_tiers.py``). The blocks count as cached from the request's arrival, so one replica equals
``simulate`` to the token. Under ``ttl`` every replica first drops the blocks idle longer than
the ttl, as ``simulate``'s loop does before each request (``policies/_lists.py``): all replicas,
so that a router sees no block a replica has dropped.

:func:`prefill_alone` is the cost model's ``T(new, cached)``, shared with the KV pools.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._budget import classify
from prefixscope.analysis.fleet._records import piece
from prefixscope.analysis.fleet._sets import _bit, _evict_to, _touch
from prefixscope.analysis.fleet._stale import logged, note
from prefixscope.analysis.fleet._tiers import hbm_over_dram, store_after
from prefixscope.analysis.policies._lists import _unlink


@piece
def prefill_alone(cost, inp, served_blocks, block_size):  # type: ignore[no-untyped-def]
    """One prompt of ``inp`` tokens alone in a step, the first ``served_blocks`` served."""
    new = max(inp - min(served_blocks * block_size, inp), 1)
    c0 = max(inp - new, 0)  # an empty prompt still computes one token
    return (
        cost.a + cost.b * max(new, cost.k1) + cost.c * c0 + cost.e * max(new, cost.k2) * c0
        + cost.f * new * new
    )  # fmt: skip


@piece
def served(k, nb, recompute_last):  # type: ignore[no-untyped-def]
    """Blocks of a leading run of ``k`` that count: a whole prompt recomputes its last block."""
    return k - (1 if recompute_last and k >= nb and k > 0 else 0)


@piece
def _leading_run(blocks, start, end, bit, sets, tiers, source):  # type: ignore[no-untyped-def]
    """The leading run, each block from the fastest tier holding it (0 HBM, 1 DRAM, 2 store)."""
    has_dram, has_store = tiers.dram_blocks > 0, tiers.store_blocks >= 0
    k = 0
    while start + k < end:
        b = blocks[start + k]
        if sets.held[b] & bit:
            source[k] = 0
        elif has_dram and sets.dram_held[b] & bit:
            source[k] = 1
        elif has_store and sets.store_in[b]:
            source[k] = 2
        else:
            break
        k += 1
    return k


@piece
def lookup(
    r, i, blocks, start, end, inp, recompute_last, kc, cost, sched, tiers, sets, req, scratch
):  # type: ignore[no-untyped-def]
    """Request ``r``'s served run on replica ``i``: ``j* =`` the whole run unless stopping
    before a slower tier's block (recomputing from there) takes less time, transfers
    included. Sets its hit blocks and tokens, its tokens and savings by source, its copies,
    ``T(input, 0)`` and (``kc``, the unbounded cache's run, ≥ 0) its miss budget; returns
    the served run."""
    source, t_at, x_at, per_token = scratch
    bs = sched.block_size
    nb = end - start
    k = _leading_run(blocks, start, end, _bit(i), sets, tiers, source)
    tiered = tiers.dram_blocks > 0 or tiers.store_blocks >= 0
    best = k
    for j in range(k + 1):  # T(j) and X(j), the transfers of the first j blocks
        if not tiered and 0 < j < k:
            continue  # one tier: only T(0) and T(k) are used
        t_at[j] = prefill_alone(cost, inp, served(j, nb, recompute_last), bs)
        if tiered and j > 0:
            tok = min(max(inp - (j - 1) * bs, 0), bs)
            x_at[j] = x_at[j - 1] + per_token[source[j - 1]] * tok
    if tiered:
        for j in range(k - 1, -1, -1):
            slower = source[j] != 0 and x_at[k] > x_at[j]
            if slower and t_at[j] + x_at[j] < t_at[best] + x_at[best]:
                best = j
    req.hit_blocks[r] = best
    req.cost_none[r] = t_at[0]
    req.xfer[r] = x_at[best] if tiered else 0.0
    hit = min(served(best, nb, recompute_last) * bs, inp)
    if tiered:
        for j in range(best):
            tok = min(max(hit - j * bs, 0), bs)
            req.src_tok[r, source[j]] += tok
            req.saved[r, source[j]] += t_at[j] - t_at[j + 1] - (x_at[j + 1] - x_at[j])
    else:
        req.src_tok[r, 0] = hit
        req.saved[r, 0] = t_at[0] - t_at[best]
    req.hit_tok[r] = hit
    if kc >= 0:
        served_b = served(best, nb, recompute_last)
        classify(r, i, blocks, start, end, inp, served_b, k, recompute_last, kc, bs, sets, req)
    return best


@piece
def insert(r, i, blocks, start, end, best, stride, sched, tiers, sets, rep, scratch, pinned):  # type: ignore[no-untyped-def]
    """After the lookup: the request's blocks into replica ``i``'s cache (its victims into its
    DRAM tier, exclusive), then the store takes what was computed. ``pinned``: the blocks a
    ``pinned`` cache keeps (``_sets._touch``; empty under ``lru``, ``fifo`` and ``ttl``, and
    wherever there are tiers: ``caches.check_tiered_policy``)."""
    base = i * stride
    s = base + stride - 1
    cap = sched.capacity
    if tiers.dram_blocks > 0:  # exclusive tiers: a DRAM hit moves up; HBM victims move down
        rep.size[i], rep.dsize[i] = hbm_over_dram(
            blocks, start, end, i, base, s, cap, tiers.dram_blocks, rep.size[i], rep.dsize[i],
            sched.recency, sets.held, sets.nxt, sets.prv, sets.dram_held, sets.dnxt, sets.dprv,
            sets,
        )  # fmt: skip
    else:
        if logged(sets):  # what the touch adds, then what the eviction drops (front first)
            for p in range(start, end):
                if not sets.held[blocks[p]] & _bit(i):
                    note(sets, i, blocks[p], True)
        rep.size[i] += _touch(
            blocks, start, end, i, base, s, sets.held, sets.nxt, sets.prv, sched.recency, pinned
        )
        if logged(sets):
            v = sets.nxt[s]
            for _ in range(rep.size[i] - cap):
                note(sets, i, v - base, False)
                v = sets.nxt[v]
        rep.size[i] = _evict_to(i, base, s, cap, rep.size[i], sets.held, sets.nxt, sets.prv)
    if rep.filled_at[i] < 0 and rep.size[i] >= cap:
        rep.filled_at[i] = r
    # what was computed is written to the store; what the store served is used
    store_after(blocks, start, end, best, scratch[0], sched.recency, tiers, sets, rep)


@piece
def expire(t, n_rep, stride, ttl, sets, rep):  # type: ignore[no-untyped-def]
    """Every replica drops the blocks idle more than ``ttl`` seconds at ``t`` (strictly). The
    list is in order of last use (``ttl`` refreshes on a hit), so they are at its front."""
    for i in range(n_rep):
        base = i * stride
        s = base + stride - 1
        bit = ~_bit(i)
        while sets.nxt[s] != s and t - sets.last[sets.nxt[s]] > ttl:
            v = sets.nxt[s]
            _unlink(sets.nxt, sets.prv, v)
            sets.held[v - base] &= bit
            note(sets, i, v - base, False)
            rep.size[i] -= 1


@piece
def stamp(t, i, blocks, start, end, stride, sets):  # type: ignore[no-untyped-def]
    """The request's blocks were used at ``t`` on replica ``i``, hits and new alike."""
    base = i * stride
    for p in range(start, end):
        sets.last[base + blocks[p]] = t


@piece
def given_hit(r, best, nb, inp, recompute_last, cost, sched, req):  # type: ignore[no-untyped-def]
    """Request ``r``'s leading run ``best``, replayed apart (``replayed.py``): its hit tokens
    and savings as :func:`lookup` sets them for one tier."""
    bs = sched.block_size
    hit = min(served(best, nb, recompute_last) * bs, inp)
    t_none = prefill_alone(cost, inp, 0, bs)
    req.hit_blocks[r] = best
    req.cost_none[r] = t_none
    req.xfer[r] = 0.0
    req.src_tok[r, 0] = hit
    req.saved[r, 0] = t_none - prefill_alone(cost, inp, served(best, nb, recompute_last), bs)
    req.hit_tok[r] = hit

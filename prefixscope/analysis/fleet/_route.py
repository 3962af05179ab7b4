"""The stateful routers of the fleet loop, one compiled function each, and :func:`route`, the
table that picks one by its code (``routers.ROUTERS`` names them). Every rule reads the
replicas' state at the request's arrival and returns a replica; ties go to the first replica
from ``r mod N`` on (``_sets._argmin``).

A rule has the signature ``(r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride)``.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import CACHE_AWARE, KV_AWARE, LEAST_LOADED, piece
from prefixscope.analysis.fleet._sets import UNPINNED, _argmin, _evict_to, _overlaps, _touch
from prefixscope.analysis.fleet._stale import catch_up


@piece
def least_loaded(r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride, block_size):  # type: ignore[no-untyped-def]
    """The fewest prefill tokens queued."""
    return _argmin(rep.outstanding, n_rep, r)


@piece
def _kv_pick(r, start, end, blocks, held, rp, rep, n_rep, block_size):  # type: ignore[no-untyped-def]
    """Dynamo's logit, lowest wins: load weight × (queued prefill + decode context) in blocks
    − overlap weight × the leading run each replica holds (by ``held``)."""
    _overlaps(blocks, start, end, held, n_rep, rep.overlap)
    for j in range(n_rep):
        load = (rep.outstanding[j] + rep.sum_ctx[j]) / block_size
        rep.score[j] = rp.load_weight * load - rp.overlap_weight * rep.overlap[j]
    return _argmin(rep.score, n_rep, r)


@piece
def kv_aware(r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride, block_size):  # type: ignore[no-untyped-def]
    """:func:`_kv_pick` over the caches as they are, or as they were ``rp.delay_s`` ago
    (``_stale.py``); the loads are always current."""
    if rp.delay_s > 0:
        catch_up(sets, arrival - rp.delay_s, n_rep)
        return _kv_pick(r, start, end, blocks, sets.rview, rp, rep, n_rep, block_size)
    return _kv_pick(r, start, end, blocks, sets.held, rp, rep, n_rep, block_size)


@piece
def fresh_pick(r, start, end, blocks, rp, rep, sets, n_rep, block_size):  # type: ignore[no-untyped-def]
    """The replica a stale router would have picked with a fresh view (the miss budget's
    ``STALE``); -1 for a router whose view cannot lag."""
    if rp.kind != KV_AWARE:
        return -1
    return _kv_pick(r, start, end, blocks, sets.held, rp, rep, n_rep, block_size)


@piece
def cache_aware(r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride, block_size):  # type: ignore[no-untyped-def]
    """SGLang's gateway: each replica's approximate tree (evicted to its bound every interval);
    the least in flight when loads are imbalanced, else the longest match when it covers the
    threshold share, else the smallest tree. The chosen tree takes the request's blocks."""
    n_unique = stride - 1
    interval = rp.evict_interval_s
    if interval >= 0 and arrival - rep.clock[0] >= interval:
        for j in range(n_rep):
            sj = j * stride + n_unique
            rep.tsize[j] = _evict_to(
                j, j * stride, sj, rp.tree_blocks, rep.tsize[j], sets.tree_held, sets.tnxt,
                sets.tprv,
            )  # fmt: skip
        rep.clock[0] = arrival
    inflight = rep.inflight
    hi_load, lo_load = inflight[0], inflight[0]
    for j in range(1, n_rep):
        hi_load, lo_load = max(hi_load, inflight[j]), min(lo_load, inflight[j])
    if hi_load - lo_load > rp.balance_abs and hi_load > rp.balance_rel * lo_load:
        i = _argmin(inflight, n_rep, r)
    else:
        _overlaps(blocks, start, end, sets.tree_held, n_rep, rep.overlap)
        for j in range(n_rep):
            rep.score[j] = -rep.overlap[j]
        best = _argmin(rep.score, n_rep, r)
        if end > start and rep.overlap[best] >= rp.threshold * (end - start):
            i = best
        else:
            for j in range(n_rep):
                rep.score[j] = rep.tsize[j]
            i = _argmin(rep.score, n_rep, r)
    sj = i * stride + n_unique
    base = i * stride
    rep.tsize[i] += _touch(
        blocks, start, end, i, base, sj, sets.tree_held, sets.tnxt, sets.tprv, True, UNPINNED
    )
    if interval < 0:  # no periodic eviction: keep the bound at every insert
        rep.tsize[i] = _evict_to(
            i, base, sj, rp.tree_blocks, rep.tsize[i], sets.tree_held, sets.tnxt, sets.tprv
        )
    return i


@piece
def route(r, start, end, blocks, arrival, assign, rp, rep, sets, n_rep, stride, block_size):  # type: ignore[no-untyped-def]
    """The replica of request ``r``: a fixed router's assignment, or the rule of ``rp.kind``.
    A new rule is one function above and one line here."""
    if rp.kind == LEAST_LOADED:
        return least_loaded(
            r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride, block_size
        )
    if rp.kind == CACHE_AWARE:
        return cache_aware(r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride, block_size)
    if rp.kind == KV_AWARE:
        return kv_aware(r, start, end, blocks, arrival, rp, rep, sets, n_rep, stride, block_size)
    return assign[r]  # FIXED

"""The compiled fleet loop: requests in arrival order, a router, a cache or KV pool per replica
and a discrete-event model of each replica's steps (docs/fleet.md). It composes small compiled
pieces, each in its own module:

- ``_route.py``: the routers (a rule per function, picked by code);
- ``_sched.py``: one step of a replica (vLLM's scheduler with chunked prefill, preemption);
- ``_cache.py`` and ``_tiers.py``: the ``ideal`` engine's cache, DRAM tier and shared store;
  ``_policy_cache.py``: its caches under a row policy (``lfu``, ``s3fifo``; ``pinned`` is a
  list), whose operations it calls through function values;
- ``_pool.py``: the ``vllm`` and ``sglang`` engines' KV pool;
- ``_records.py``: the settings (named tuples) and the state (named tuples of arrays).

Per request ``r`` arriving at ``t``:

1. every replica runs the steps that start before ``t`` (so its queue is what it was at ``t``);
2. the router picks a replica (a fixed assignment, or a rule over the replicas' state at ``t``);
3. ``ideal``: that replica's cache is looked up and touched now, as ``simulate`` does (under
   ``ttl``, every replica first drops its idle blocks); under a
   KV pool the lookup waits until the scheduler schedules the request;
4. the request joins the replica's queue.

Replica sets are ``uint64`` bit masks per block (which replicas cache it, which replicas' router
trees hold it), so probing every replica costs one load per block of the longest run.
"""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.fleet._budget import classify
from prefixscope.analysis.fleet._cache import expire, given_hit, insert, lookup, served, stamp
from prefixscope.analysis.fleet._policy_cache import touch_and_evict
from prefixscope.analysis.fleet._records import IDEAL, LIST, NONE, PINNED, VLLM, piece
from prefixscope.analysis.fleet._route import fresh_pick, route
from prefixscope.analysis.fleet._sched import coast, step


@piece
def _init(n, n_rep, stride, sched, tiers, sets, pool):  # type: ignore[no-untyped-def]
    """Every list starts empty; a vllm free queue holds ``capacity`` hashless blocks."""
    for i in range(n_rep):
        s = i * stride + stride - 1
        if sets.nxt.size > 1:  # lfu and s3fifo keep no list: their own rows
            sets.nxt[s] = s
            sets.prv[s] = s
        if sets.tnxt.size > 1:
            sets.tnxt[s] = s
            sets.tprv[s] = s
        if tiers.dram_blocks > 0:
            sets.dnxt[s] = s
            sets.dprv[s] = s
        if sched.engine == VLLM and sched.caching:
            pool.anon_before[s] = sched.capacity
        if sched.engine != IDEAL:
            pool.rnext[n + i] = n + i
            pool.rprev[n + i] = n + i
    if tiers.store_blocks >= 0:
        su = stride - 1
        sets.snxt[su] = su
        sets.sprv[su] = su


@piece
def _missed(r, t, arrival, req, stop):  # type: ignore[no-untyped-def]
    """Whether some TTFT target is missed for sure at time ``t``, request ``r`` arriving. Every
    replica has run the steps that start before ``t``, so a measured request that arrived more
    than a limit before ``t`` either has its first token (its TTFT is known) or gets it at the
    end of a later step, after ``t``: its TTFT exceeds the limit. A target is missed once the
    requests known to exceed it reach its ``allowed`` count."""
    for k in range(stop.limit.size):
        q = stop.ptr[k]
        while q < r and arrival[q] + stop.limit[k] < t:
            if req.gen[q] == 0 or req.ttft[q] > stop.limit[k]:
                stop.count[k] += 1
            q += 1
        stop.ptr[k] = q
        if stop.count[k] >= stop.allowed[k]:
            return True
    return False


@numba.njit(cache=True, nogil=True, _nrt=False)
def fleet(tr, assign, cost, sched, rp, tiers, req, rep, hp, sets, pool, scratch, stop):  # type: ignore[no-untyped-def]
    """Run the trace ``tr`` (``_records.Workload``) through the fleet; fills the state.
    ``scratch``: per block of the longest request, its tier, ``T(j)`` and the copies ``X(j)``;
    the copy seconds per token by tier. ``stop`` (``_records.Stop``): the loop ends at the
    arrival where a TTFT target is missed for sure, leaving the rest unsimulated. Compiled
    without reference counting, as its pieces are (``_records.piece``): it allocates nothing."""
    n = tr.offsets.size - 1
    n_rep = rep.now.size
    stride = sets.held.size + 1
    _init(n, n_rep, stride, sched, tiers, sets, pool)
    for r in range(n + n_rep):
        # r < n: request r arrives; r >= n: drain replica r - n
        t = tr.arrival[r] if r < n else np.inf
        lo, hi = (0, n_rep) if r < n else (r - n, r - n + 1)
        for i in range(lo, hi):
            while rep.now[i] < t and (rep.qhead[i] != NONE or rep.n_dec[i] > 0):
                if coast(i, t, tr, cost, sched, tiers, stride, req, rep, hp, sets, pool) > 0:
                    continue  # decodes alone until an event: summed apart, as fast as sums
                step(i, tr, cost, sched, tiers, stride, req, rep, hp, sets, pool)
            if r < n and rep.now[i] < t:
                rep.now[i] = t  # idle until the arrival
        if r >= n:
            continue
        if stop.limit.size > 0 and _missed(r, t, tr.arrival, req, stop):
            stop.at[0] = r
            return
        start, end = tr.offsets[r], tr.offsets[r + 1]
        sets.log_now[0] = t
        if sched.ttl >= 0:
            expire(t, n_rep, stride, sched.ttl, sets, rep)
        i = route(
            r, start, end, tr.blocks, t, assign, rp, rep, sets, n_rep, stride, sched.block_size
        )
        req.replica[r] = i
        if req.fresh.size > 1:  # a stale view: where a fresh one would have sent it
            bs = sched.block_size
            req.fresh[r] = fresh_pick(r, start, end, tr.blocks, rp, rep, sets, n_rep, bs)
        inp = tr.input_tokens[r]
        kc = tr.ceiling_run[r] if tr.ceiling_run.size else -1  # -1: no miss budget
        if sched.engine == IDEAL:
            if tr.given_hits.size:  # its replica's policy was replayed apart
                k = tr.given_hits[r]
                rl = tr.recompute_last[r]
                given_hit(r, k, end - start, inp, rl, cost, sched, req)
                if kc >= 0:  # no state kept here: a seen block not served counts as evicted
                    s_b = served(k, end - start, rl)
                    bs = sched.block_size
                    classify(r, i, tr.blocks, start, end, inp, s_b, k, rl, kc, bs, sets, req)
            else:
                best = lookup(
                    r, i, tr.blocks, start, end, inp, tr.recompute_last[r], kc, cost, sched,
                    tiers, sets, req, scratch,
                )  # fmt: skip
                if sched.policy == LIST or sched.policy == PINNED:  # a list, pins off it
                    insert(
                        r, i, tr.blocks, start, end, best, stride, sched, tiers, sets, rep,
                        scratch, tr.pinned,
                    )  # fmt: skip
                else:
                    touch_and_evict(
                        r, i, tr.blocks, start, end, best, stride, tr.parent, sched, tiers,
                        sets, rep, scratch,
                    )  # fmt: skip
                if sched.ttl >= 0:
                    stamp(t, i, tr.blocks, start, end, stride, sets)
            new = max(inp - req.hit_tok[r], 1)
            req.rem[r] = new
            req.ctx[r] = max(inp - new, 0)
        else:  # what it must prefill is known when it is scheduled
            req.rem[r] = inp
        rep.outstanding[i] += req.rem[r]
        rep.inflight[i] += 1
        if rep.qtail[i] == NONE:
            rep.qhead[i] = r
        else:
            req.qnext[rep.qtail[i]] = r
        rep.qtail[i] = r

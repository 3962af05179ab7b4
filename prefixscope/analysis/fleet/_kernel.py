"""The compiled fleet loop: requests in arrival order, a router, one cache per replica and a
discrete-event model of each replica's prefill and decode steps (docs/fleet.md).

Per request ``r`` arriving at ``t``:

1. every replica runs the steps that start before ``t`` (so its queue is what it was at ``t``);
2. the router picks a replica (a fixed assignment, or a rule over the replicas' state at ``t``);
3. that replica's cache is looked up (the leading run of cached blocks) and touched, as
   ``simulate`` does (``policies/_lists.py``: deepest block first, so it leaves first among
   equals; evict while over capacity). The blocks count as cached from the request's arrival,
   as in ``simulate``, so one replica equals ``simulate`` to the token;
4. the request joins the replica's queue with ``max(1, input - hit tokens)`` tokens to prefill.

A replica's step (vLLM's scheduler with chunked prefill): every decoding request adds one
token; the queue, first come first served, fills what is left of the token ``budget``, a
request's prefill split across steps when it does not fit; at most ``max_seqs`` requests are
running (decoding or part-prefilled). Its time is the cost model over the step:
``a + b·max(n, k₁)`` for the ``n`` tokens of the step (the weights read once per step),
``c·ctx + e·max(m, k₂)·ctx + f·m²`` per prefill chunk of ``m`` tokens after ``ctx`` positions,
and ``(c + e·max(1, k₂))·ctx + f`` per decoding request at context ``ctx``. A request's first
token is out when the step holding its last prefill chunk ends (its TTFT); it then decodes
``output - 1`` more tokens, one per step.

Replica sets are ``uint64`` bit masks per block (which replicas cache it, which replicas' router
trees hold it), so probing every replica costs one load per block of the longest run.
"""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.fleet._sets import (
    _argmin,
    _bit,
    _evict_to,
    _overlaps,
    _touch,
)
from prefixscope.analysis.fleet._tiers import hbm_over_dram, store_write

FIXED, LEAST_LOADED, CACHE_AWARE, KV_AWARE = 0, 1, 2, 3
LRU, FIFO = 0, 1
NONE = -1

# cost: a, b, c, e, f, k1, k2
# rparams: cache_threshold, balance_abs, balance_rel, tree_blocks, evict_interval_s,
#          overlap_weight, load_weight


@numba.njit(cache=True, nogil=True)
def fleet(  # type: ignore[no-untyped-def]
    offsets,
    blocks,
    arrival,
    input_tokens,
    output_tokens,
    recompute_last,
    block_size,
    router,
    assign,
    n_rep,
    capacity,
    policy,
    cost,
    budget,
    max_seqs,
    rparams,
    held,
    nxt,
    prv,
    tree_held,
    tnxt,
    tprv,
    tiers,
    dram_held,
    dnxt,
    dprv,
    store_in,
    snxt,
    sprv,
):
    n = offsets.size - 1
    n_unique = held.size
    stride = n_unique + 1
    a, cb, cc, ce, cf, k1, k2 = cost[0], cost[1], cost[2], cost[3], cost[4], cost[5], cost[6]
    threshold, bal_abs, bal_rel = rparams[0], rparams[1], rparams[2]
    tree_cap, interval, w_overlap, w_load = int(rparams[3]), rparams[4], rparams[5], rparams[6]
    decode_unit = cc + ce * max(1.0, k2)
    dram_cap, store_cap = int(tiers[0]), int(tiers[1])  # 0: no DRAM tier; -1: no store
    per_token = np.array([0.0, tiers[2], tiers[3]])  # transfer seconds per token, by source
    has_dram, has_store = dram_cap > 0, store_cap >= 0
    for i in range(n_rep):  # sentinels: each list starts empty
        s = i * stride + n_unique
        nxt[s] = s
        prv[s] = s
        if tnxt.size > 1:
            tnxt[s] = s
            tprv[s] = s
        if has_dram:
            dnxt[s] = s
            dprv[s] = s
    if has_store:
        snxt[n_unique] = n_unique
        sprv[n_unique] = n_unique
    longest = 0
    for r in range(n):
        longest = max(longest, offsets[r + 1] - offsets[r])
    source = np.zeros(longest + 1, np.int8)  # per block of the leading run: 0 HBM, 1 DRAM, 2 store
    t_at = np.zeros(longest + 2, np.float64)  # T(j): the prefill with j blocks served
    x_at = np.zeros(longest + 2, np.float64)  # X(j): the transfers of the first j blocks
    src_tok = np.zeros((n, 3), np.int64)  # hit tokens by source
    saved = np.zeros((n, 3), np.float64)  # prefill seconds each source saves, transfers paid
    xfer = np.zeros(n, np.float64)
    cost_none = np.zeros(n, np.float64)  # T(input, 0): the request without any cache
    dsize = np.zeros(n_rep, np.int64)
    ssize = 0
    # per request
    replica = np.full(n, NONE, np.int32)
    hit_blocks = np.zeros(n, np.int32)
    hit_tok = np.zeros(n, np.int64)
    ttft = np.zeros(n, np.float64)
    first_start = np.zeros(n, np.float64)
    done_at = np.zeros(n, np.float64)
    rem = np.zeros(n, np.int64)  # prefill tokens still to compute
    ctx = np.zeros(n, np.int64)  # positions before the next chunk
    qnext = np.full(n, NONE, np.int64)
    started = np.zeros(n, np.bool_)
    # per replica
    size = np.zeros(n_rep, np.int64)
    tsize = np.zeros(n_rep, np.int64)
    filled_at = np.full(n_rep, NONE, np.int64)
    now = np.zeros(n_rep, np.float64)
    busy = np.zeros(n_rep, np.float64)
    steps = np.zeros(n_rep, np.int64)
    prefill_tok = np.zeros(n_rep, np.int64)
    decode_tok = np.zeros(n_rep, np.int64)
    qhead = np.full(n_rep, NONE, np.int64)
    qtail = np.full(n_rep, NONE, np.int64)
    n_started = np.zeros(n_rep, np.int64)
    outstanding = np.zeros(n_rep, np.float64)  # prefill tokens queued (the least-loaded load)
    inflight = np.zeros(n_rep, np.float64)  # routed, not finished (the cache-aware load)
    n_dec = np.zeros(n_rep, np.int64)
    sum_ctx = np.zeros(n_rep, np.int64)  # context of the decoding requests
    heap_key = np.zeros(n_rep * max_seqs, np.int64)  # step count at which a decode ends
    heap_req = np.zeros(n_rep * max_seqs, np.int64)
    heap_n = np.zeros(n_rep, np.int64)
    overlap = np.zeros(n_rep, np.int64)
    score = np.zeros(n_rep, np.float64)
    last_evict = 0.0 if n == 0 else arrival[0]

    for r in range(n + n_rep):
        # r < n: request r arrives; r >= n: drain replica r - n
        t = arrival[r] if r < n else np.inf
        lo, hi = (0, n_rep) if r < n else (r - n, r - n + 1)
        for i in range(lo, hi):
            while now[i] < t and (qhead[i] != NONE or n_dec[i] > 0):
                # --- one step of replica i ---
                d = n_dec[i]
                left = budget - d
                step = a + cf * d + decode_unit * sum_ctx[i]
                tokens = d
                q = qhead[i]
                while q != NONE and left > 0:
                    if not started[q]:
                        if d + n_started[i] >= max_seqs:
                            break
                        started[q] = True
                        n_started[i] += 1
                        first_start[q] = now[i]
                        step += xfer[q]  # its prefix is loaded before its first chunk
                    take = min(rem[q], left)
                    c0 = ctx[q]
                    step += cc * c0 + ce * max(take, k2) * c0 + cf * take * take
                    tokens += take
                    left -= take
                    rem[q] -= take
                    ctx[q] += take
                    outstanding[i] -= take
                    if rem[q] > 0:
                        break
                    q = qnext[q]
                step += cb * max(tokens, k1)
                now[i] += step
                busy[i] += step
                steps[i] += 1
                prefill_tok[i] += tokens - d
                decode_tok[i] += d
                sum_ctx[i] += d
                base = i * max_seqs
                while heap_n[i] > 0 and heap_key[base] <= steps[i]:  # decodes that end
                    done = heap_req[base]
                    sum_ctx[i] -= input_tokens[done] + output_tokens[done]
                    n_dec[i] -= 1
                    inflight[i] -= 1
                    done_at[done] = now[i]
                    heap_n[i] -= 1
                    m = heap_n[i]
                    key, req = heap_key[base + m], heap_req[base + m]
                    j = 0
                    while True:  # sift the last entry down from the root
                        c = 2 * j + 1
                        if c >= m:
                            break
                        if c + 1 < m and heap_key[base + c + 1] < heap_key[base + c]:
                            c += 1
                        if heap_key[base + c] >= key:
                            break
                        heap_key[base + j], heap_req[base + j] = (
                            heap_key[base + c],
                            heap_req[base + c],
                        )
                        j = c
                    if m > 0:
                        heap_key[base + j], heap_req[base + j] = key, req
                h = qhead[i]
                while h != q:  # prefills completed in this step: first token out
                    nx = qnext[h]
                    ttft[h] = now[i] - arrival[h]
                    n_started[i] -= 1
                    more = output_tokens[h] - 1
                    if more > 0:
                        key = steps[i] + more
                        j = heap_n[i]
                        heap_n[i] += 1
                        while j > 0:  # sift up
                            p = (j - 1) // 2
                            if heap_key[base + p] <= key:
                                break
                            heap_key[base + j], heap_req[base + j] = (
                                heap_key[base + p],
                                heap_req[base + p],
                            )
                            j = p
                        heap_key[base + j], heap_req[base + j] = key, h
                        n_dec[i] += 1
                        sum_ctx[i] += input_tokens[h] + 1
                    else:
                        inflight[i] -= 1
                        done_at[h] = now[i]
                    h = nx
                qhead[i] = q
                if q == NONE:
                    qtail[i] = NONE
            if r < n and now[i] < t:
                now[i] = t  # idle until the arrival
        if r >= n:
            continue

        # --- route ---
        start, end = offsets[r], offsets[r + 1]
        if router == FIXED:
            i = assign[r]
        elif router == LEAST_LOADED:
            i = _argmin(outstanding, n_rep, r)
        elif router == KV_AWARE:
            _overlaps(blocks, start, end, held, n_rep, overlap)
            for j in range(n_rep):  # the negative score: Dynamo's logit, lowest wins
                load = (outstanding[j] + sum_ctx[j]) / block_size
                score[j] = w_load * load - w_overlap * overlap[j]
            i = _argmin(score, n_rep, r)
        else:  # CACHE_AWARE
            if interval >= 0 and arrival[r] - last_evict >= interval:
                for j in range(n_rep):
                    sj = j * stride + n_unique
                    tsize[j] = _evict_to(
                        j, j * stride, sj, tree_cap, tsize[j], tree_held, tnxt, tprv
                    )
                last_evict = arrival[r]
            hi_load, lo_load = inflight.max(), inflight.min()
            if hi_load - lo_load > bal_abs and hi_load > bal_rel * lo_load:
                i = _argmin(inflight, n_rep, r)
            else:
                _overlaps(blocks, start, end, tree_held, n_rep, overlap)
                best = _argmin(-overlap.astype(np.float64), n_rep, r)
                if end > start and overlap[best] >= threshold * (end - start):
                    i = best
                else:
                    i = _argmin(tsize.astype(np.float64), n_rep, r)
            sj = i * stride + n_unique
            tsize[i] += _touch(blocks, start, end, i, i * stride, sj, tree_held, tnxt, tprv, True)
            if interval < 0:  # no periodic eviction: keep the bound at every insert
                tsize[i] = _evict_to(i, i * stride, sj, tree_cap, tsize[i], tree_held, tnxt, tprv)
        replica[r] = i

        # --- the replica's cache (and its tiers) ---
        bit = _bit(i)
        base = i * stride
        s = base + n_unique
        inp = input_tokens[r]
        nb = end - start
        k = 0  # the leading run: each block from the fastest tier that holds it
        while start + k < end:
            b = blocks[start + k]
            if held[b] & bit:
                source[k] = 0
            elif has_dram and dram_held[b] & bit:
                source[k] = 1
            elif has_store and store_in[b]:
                source[k] = 2
            else:
                break
            k += 1
        # T(j) and X(j) for j = 0..k; serve j* = the k blocks unless stopping before a slower
        # tier's block (recomputing from there) takes less time, transfers included
        best = k
        tiered = has_dram or has_store
        for j in range(k + 1):
            if not tiered and 0 < j < k:
                continue  # one tier: only T(0) and T(k) are used
            served_j = j - (1 if recompute_last[r] and j >= nb and j > 0 else 0)
            new_j = max(inp - min(served_j * block_size, inp), 1)
            c0 = max(inp - new_j, 0)  # an empty prompt still computes one token
            t_at[j] = (
                a + cb * max(new_j, k1) + cc * c0 + ce * max(new_j, k2) * c0 + cf * new_j * new_j
            )
            if tiered and j > 0:
                tok = min(max(inp - (j - 1) * block_size, 0), block_size)
                x_at[j] = x_at[j - 1] + per_token[source[j - 1]] * tok
        if tiered:
            for j in range(k - 1, -1, -1):
                slower = source[j] != 0 and x_at[k] > x_at[j]
                if slower and t_at[j] + x_at[j] < t_at[best] + x_at[best]:
                    best = j
        hit_blocks[r] = best
        cost_none[r] = t_at[0]
        xfer[r] = x_at[best] if tiered else 0.0
        served = best - (1 if recompute_last[r] and best >= nb and best > 0 else 0)
        hit = min(served * block_size, inp)
        if tiered:
            for j in range(best):
                tok = min(max(hit - j * block_size, 0), block_size)
                src_tok[r, source[j]] += tok
                saved[r, source[j]] += t_at[j] - t_at[j + 1] - (x_at[j + 1] - x_at[j])
        else:
            src_tok[r, 0] = hit
            saved[r, 0] = t_at[0] - t_at[best]

        if has_dram:  # exclusive tiers: a DRAM hit moves up; HBM victims move down
            size[i], dsize[i] = hbm_over_dram(
                blocks, start, end, i, base, s, capacity, dram_cap, size[i], dsize[i],
                policy == LRU, held, nxt, prv, dram_held, dnxt, dprv,
            )  # fmt: skip
        else:
            size[i] += _touch(blocks, start, end, i, base, s, held, nxt, prv, policy == LRU)
            size[i] = _evict_to(i, base, s, capacity, size[i], held, nxt, prv)
        if filled_at[i] == NONE and size[i] >= capacity:
            filled_at[i] = r
        if has_store:  # what was computed is written; what the store served is used again
            ssize = store_write(
                blocks, start, end, best, source, store_cap, ssize, policy == LRU,
                store_in, snxt, sprv,
            )  # fmt: skip

        # --- join the queue ---
        hit_tok[r] = hit
        new = max(input_tokens[r] - hit, 1)
        rem[r] = new
        ctx[r] = max(input_tokens[r] - new, 0)
        outstanding[i] += new
        inflight[i] += 1
        if qtail[i] == NONE:
            qhead[i] = r
        else:
            qnext[qtail[i]] = r
        qtail[i] = r

    return (
        replica,
        hit_blocks,
        hit_tok,
        ttft,
        first_start,
        done_at,
        busy,
        steps,
        prefill_tok,
        decode_tok,
        filled_at,
        now,
        src_tok,
        saved,
        xfer,
        cost_none,
    )

"""A request takes its blocks from its replica's KV pool (``_pool.py``): at its admission, and
under ``vllm`` chunk by chunk as its prefill is scheduled.

A request's blocks are positions in one order: its prompt's blocks (the trace's ids), then,
for a request readmitted after a preemption, the answer positions its known tokens fill
(named by its next turn, ``structure/answers.py``), then hashless ones (a partial block, the
rest of its generated tokens). ``req.pheld`` prompt positions, ``req.ans_own`` answer
positions and ``req.anon`` hashless ones are held, in that order.

- ``sglang`` takes every position at admission, as SGLang's scheduler reserves a request's
  room when it adds it to a batch.
- ``vllm`` follows vLLM 0.34.0's scheduler with its default ``scheduler_reserve_full_isl``:
  a waiting request is admitted only if the free blocks could hold its whole sequence
  (``allocate_slots(full_sequence_must_fit=True)`` in ``vllm/v1/core/kv_cache_manager.py``),
  but it takes only its cached leading run and the blocks of its first chunk; each later
  chunk takes its own blocks when it is scheduled (:func:`extend`), and when they are not
  free the scheduler preempts its newest running request, the chunk's own request included
  (``schedule`` in ``vllm/v1/core/sched/scheduler.py``). A chunk's blocks carry their ids
  from the step that schedules them, as ``allocate_slots`` caches them.
- Below the pool (``vllm``), the blocks a replica's DRAM tier or the store hold extend the
  leading run; they are loaded, not computed (``_tiers.write_through`` fills the tiers).
"""

from __future__ import annotations

from prefixscope.analysis.fleet._budget import classify
from prefixscope.analysis.fleet._cache import prefill_alone, served
from prefixscope.analysis.fleet._pool import _joins, _split, lock, register, take
from prefixscope.analysis.fleet._records import NONE, SGLANG, piece, step_piece
from prefixscope.analysis.fleet._sets import _bit

# The helpers below are inlined into :func:`admit` and :func:`extend` (``step_piece``): a call
# passes every array of every record apart (``_records.step_piece``).


@step_piece
def _answer_span(q, tr, sched, req):  # type: ignore[no-untyped-def]
    """The request's answer positions (a readmission's under ``vllm``) and all its positions."""
    nb = tr.offsets[q + 1] - tr.offsets[q]
    bs = sched.block_size
    length = tr.input_tokens[q] + req.gen[q]
    m = 0
    if req.gen[q] > 0 and sched.engine != SGLANG:
        m = min(tr.answer_offsets[q + 1] - tr.answer_offsets[q], max(length // bs - nb, 0))
    return m, max(nb + m, (length + bs - 1) // bs)


@step_piece
def _fits(q, i, lo, hi, m, tr, stride, sched, sets, pool):  # type: ignore[no-untyped-def]
    """Whether the free blocks cover positions ``lo .. hi``: each takes one but a cached block
    another running request holds, and a block the prompt named before. The count stops once
    it passes the free blocks: a request that does not fit is retried at every step of a full
    pool, and on 14 replicas of 8 hours of the generated week those retries scanned 12.4 M
    positions in all, more than the 11.3 M lookups (benchmarks/RESULTS.md)."""
    free = pool.free_n[i]
    if not sched.caching:  # a block each
        return hi - lo <= free
    start, nb = tr.offsets[q], tr.offsets[q + 1] - tr.offsets[q]
    base, bit = i * stride, _bit(i)
    need = 0
    for j in range(lo, hi):
        if j < nb:
            b = tr.blocks[start + j]
            if tr.repeat[start + j]:
                continue
        elif j < nb + m:
            b = tr.answer_blocks[tr.answer_offsets[q] + j - nb]
        else:
            need += 1
            if need > free:
                return False
            continue
        if not sets.held[b] & bit or pool.refcnt[base + b] == 0:
            need += 1
            if need > free:
                return False
    return True


@step_piece
def whole_fits(q, i, tr, stride, sched, sets, pool, req):  # type: ignore[no-untyped-def]
    """The admission rule: request ``q``'s whole sequence fits replica ``i``'s free blocks
    (:func:`admit`'s check, and a waiting head's in ``_sched._waits``)."""
    m, total = _answer_span(q, tr, sched, req)
    return _fits(q, i, 0, total, m, tr, stride, sched, sets, pool)


@step_piece
def _lock_and_name(q, i, lo, hi, m, tr, stride, sched, sets, pool, rep):  # type: ignore[no-untyped-def]
    """Positions ``lo .. hi`` of request ``q``: the cached ones locked first, so taking new
    blocks cannot evict them, then new blocks taken and named, parents before children."""
    start, nb = tr.offsets[q], tr.offsets[q + 1] - tr.offsets[q]
    a0 = tr.answer_offsets[q]
    base, bit = i * stride, _bit(i)
    for j in range(lo, min(hi, nb + m)):
        if j < nb:
            b = tr.blocks[start + j]
            if sets.held[b] & bit and not tr.repeat[start + j]:
                lock(i, base + b, stride, sched, sets, pool, rep.now.size)
        else:
            b = tr.answer_blocks[a0 + j - nb]
            if sets.held[b] & bit:
                lock(i, base + b, stride, sched, sets, pool, rep.now.size)
                pool.ans_mine[a0 + j - nb] = True
    prev = NONE  # the previous position's node, where this call cached it
    for j in range(lo, hi):
        if j < nb:
            b = tr.blocks[start + j]
            if sets.held[b] & bit:
                prev = NONE
                continue
            take(i, q, stride, sched, tr.parent, sets, pool, rep)
            register(i, b, stride, sched, tr.parent, sets, pool)
            if sched.engine == SGLANG:
                chained = prev != NONE and tr.parent[b] == tr.blocks[start + j - 1]
                _joins(base + b, prev if chained else NONE, pool)
            prev = base + b
        elif j < nb + m:
            if not pool.ans_mine[a0 + j - nb]:
                take(i, q, stride, sched, tr.parent, sets, pool, rep)
                register(i, tr.answer_blocks[a0 + j - nb], stride, sched, tr.parent, sets, pool)
                pool.ans_mine[a0 + j - nb] = True
        else:
            take(i, q, stride, sched, tr.parent, sets, pool, rep)


@step_piece
def _hold(q, i, lo, hi, m, tr, stride, sched, sets, pool, req, rep):  # type: ignore[no-untyped-def]
    """Request ``q``, holding positions ``0 .. lo``, holds ``lo .. hi`` too (their free blocks
    counted by the caller): :func:`_lock_and_name`, or with prefix caching off a hashless
    block each (no answer positions then: ``m`` is 0)."""
    if sched.caching:
        _lock_and_name(q, i, lo, hi, m, tr, stride, sched, sets, pool, rep)
    else:
        pool.free_n[i] -= hi - lo
    nb = tr.offsets[q + 1] - tr.offsets[q]
    req.pheld[q] = min(hi, nb)
    req.ans_own[q] = min(max(hi - nb, 0), m)
    req.ans_n[q] = req.ans_own[q]
    req.anon[q] = max(hi - nb - m, 0)
    rep.footprint[i] += hi - lo


@step_piece
def extend(q, i, upto, tr, stride, sched, sets, pool, req, rep):  # type: ignore[no-untyped-def]
    """``vllm``: the blocks request ``q``'s first ``upto`` tokens need, taken where it holds
    fewer; ``False``, nothing changed, when they are not free."""
    m, total = _answer_span(q, tr, sched, req)
    have = req.pheld[q] + req.ans_own[q] + req.anon[q]
    want = min(total, (upto + sched.block_size - 1) // sched.block_size)
    if want <= have:
        return True
    if not _fits(q, i, have, want, m, tr, stride, sched, sets, pool):
        return False
    _hold(q, i, have, want, m, tr, stride, sched, sets, pool, req, rep)
    return True


@step_piece
def _tier_run(p, end, bit, blocks, tiers, sets):  # type: ignore[no-untyped-def]
    """Where the leading run goes on from position ``p`` in the replica's DRAM tier or the
    store (vLLM's connector looks past the GPU's hit: ``get_num_new_matched_tokens``)."""
    if tiers.dram_blocks == 0 and tiers.store_blocks < 0:
        return p
    while p < end:
        b = blocks[p]
        if not (
            (tiers.dram_blocks > 0 and sets.dram_held[b] & bit)
            or (tiers.store_blocks >= 0 and sets.store_in[b])
        ):
            break
        p += 1
    return p


@step_piece
def _loads(q, k, loaded, first, tr, cost, bs, tiers, sets, req, bit):  # type: ignore[no-untyped-def]
    """Seconds copying blocks ``k .. loaded`` of request ``q``'s prompt from the tiers (DRAM
    where it holds a block, else the store); at its first admission, their tokens and savings
    by tier too, as the ``ideal`` engine's lookup credits them."""
    inp = tr.input_tokens[q]
    start = tr.offsets[q]
    seconds = 0.0
    t_prev = prefill_alone(cost, inp, k, bs)
    for j in range(k, loaded):
        tok = min(max(inp - j * bs, 0), bs)
        src = 1 if tiers.dram_blocks > 0 and sets.dram_held[tr.blocks[start + j]] & bit else 2
        x = tok * (tiers.dram_s if src == 1 else tiers.store_s)
        seconds += x
        if first:
            t_next = prefill_alone(cost, inp, j + 1, bs)
            req.src_tok[q, src] += tok
            req.saved[q, src] += t_prev - t_next - x
            t_prev = t_next
    return seconds


@step_piece
def lookup(q, i, tr, sched, tiers, stride, sets, pool):  # type: ignore[no-untyped-def]
    """Request ``q``'s leading run on replica ``i``: in its pool, through its tiers, and the
    blocks the lookup hands over; ``sglang`` splits the radix node where that ends (SGLang's
    ``_match_prefix_helper``), so a second lookup with nothing changed between changes
    nothing."""
    start, end = tr.offsets[q], tr.offsets[q + 1]
    bit = _bit(i)
    k = 0
    while start + k < end and sets.held[tr.blocks[start + k]] & bit:
        k += 1
    kt = _tier_run(start + k, end, bit, tr.blocks, tiers, sets) - start
    matched = served(kt, end - start, tr.recompute_last[q])  # what the lookup hands over
    if sched.engine == SGLANG and matched > 0:
        _split(i * stride + tr.blocks[start + matched - 1], pool)
    return k, kt, matched


@piece
def admit(q, i, left, tr, cost, sched, tiers, stride, sets, pool, req, rep):  # type: ignore[no-untyped-def]
    """Schedule request ``q`` on replica ``i`` if its blocks fit: look up its prompt's
    leading run and hold it (``sglang``: every position; ``vllm``: the run and its first
    chunk, at most ``left`` tokens, the later chunks by :func:`extend`). ``False``, nothing
    changed, when the free blocks (cached ones it hits count against them) fall short of its
    whole sequence, as vLLM's ``allocate_slots`` refuses. A request not running holds
    nothing (``_sched._free`` and ``_pool.release`` zero its counts). Its hit is its first
    admission's lookup, as vLLM's metric counts it (``v1/metrics/stats.py``; a lookup after
    a preemption is not a query there). Under ``vllm`` a request readmitted after a
    preemption looks up its generated tokens too (vLLM hashes them): the answer positions its
    known tokens fill are blocks like its prompt's. With tiers (``vllm``) the lookup goes on
    past the pool's run through the blocks its replica's DRAM tier or the store holds, as
    vLLM's connector does (``get_num_new_matched_tokens``); they take pool blocks like
    computed ones and are copied before its first chunk (``req.xfer``)."""
    start, end = tr.offsets[q], tr.offsets[q + 1]
    nb = end - start
    bs = sched.block_size
    bit = _bit(i)
    inp = tr.input_tokens[q]
    length = inp + req.gen[q]  # a preempted request recomputes its generated tokens too
    a0 = tr.answer_offsets[q]
    m, total = _answer_span(q, tr, sched, req)
    sg = sched.engine == SGLANG
    if not sg and not whole_fits(q, i, tr, stride, sched, sets, pool, req):
        return False  # before the lookup, which a refusal leaves unused (sglang's splits)
    k, kt, matched = lookup(q, i, tr, sched, tiers, stride, sets, pool)
    k_ans = 0  # the lookup goes on into the answer (to the last token but one)
    if k == nb:
        while (
            k_ans < min(m, (length - 1) // bs - nb)
            and sets.held[tr.answer_blocks[a0 + k_ans]] & bit
        ):
            k_ans += 1
    if sg and not whole_fits(q, i, tr, stride, sched, sets, pool, req):
        return False
    first = req.gen[q] == 0 and req.seq[q] == NONE
    if first and tr.ceiling_run.size:
        rl, kc = tr.recompute_last[q], tr.ceiling_run[q]
        classify(q, i, tr.blocks, start, end, inp, matched, kt, rl, kc, bs, sets, req)
    if req.gen[q] == 0:
        hit = min(matched * bs, inp)
        new = max(inp - hit, 1)
        if not first:  # a lookup after a preemption: vLLM's preempted_* counters
            req.pre_n[q] += 1
            req.pre_q[q] += inp
            req.pre_h[q] += hit
        else:  # vLLM's hit metric counts a request's first admission alone
            g = min(k, matched)
            req.hit_blocks[q] = kt
            req.hit_tok[q] = hit
            req.src_tok[q, 0] = min(g * bs, inp)
            req.cost_none[q] = prefill_alone(cost, inp, 0, bs)
            req.saved[q, 0] = req.cost_none[q] - prefill_alone(cost, inp, g, bs)
    else:
        new = length - min(kt * bs, inp) - k_ans * bs
        req.pre_n[q] += 1
        req.pre_q[q] += length
        req.pre_h[q] += length - new
    if kt > k:  # blocks loaded from the tiers: the copies before its first chunk
        loaded = matched if req.gen[q] == 0 else kt
        req.xfer[q] = _loads(q, k, loaded, first, tr, cost, bs, tiers, sets, req, bit)
    else:
        req.xfer[q] = 0.0
    rep.outstanding[i] += new - req.rem[q]
    req.rem[q] = new
    req.ctx[q] = max(length - new, 0)
    hold = total  # sglang: every position; vllm: the cached run and the first chunk
    if not sg:
        hold = max(kt + k_ans, (req.ctx[q] + min(new, left) + bs - 1) // bs)
    _hold(q, i, 0, min(hold, total), m, tr, stride, sched, sets, pool, req, rep)
    return True

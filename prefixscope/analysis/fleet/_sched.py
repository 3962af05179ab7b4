"""One step of a replica: vLLM's scheduler with chunked prefill (docs/fleet.md).

1. (``vllm``, ``sglang``) every decoding request whose sequence crosses a block boundary in
   this step takes one block, oldest schedule first; when no block is free the newest running
   request is preempted (:func:`preempt`) until one is, or until the request itself was;
2. every decoding request adds one token; the queue, first come first served, fills what is
   left of the token ``budget``, a request's prefill split across steps when it does not fit;
   at most ``max_seqs`` requests run (decoding or part-prefilled). Under a KV pool a request
   is scheduled only when its blocks fit (``_admit.admit``), else the queue waits; under
   ``vllm`` each chunk takes its blocks when scheduled, preempting as decodes do (its own
   request, the newest, first), and a step that preempted schedules no waiting request;
3. the step's time is the cost model over its chunks and decodes (``stepcost.py``);
4. decodes that end and prefills that complete leave: a request's first token is out when
   the step holding its last prefill chunk ends (its TTFT), then it decodes ``output - 1``
   more tokens, one per step; a finished request releases its blocks.

Every request's blocks are counted in the step's footprint under ``ideal`` too (where they
are not taken from the cache), so the engines report running blocks alike.
"""

from __future__ import annotations

from prefixscope.analysis.fleet import _admit, _heap, _pool
from prefixscope.analysis.fleet._records import (
    IDEAL,
    NONE,
    SEQ_SPAN,
    SGLANG,
    VLLM,
    step_piece,
)
from prefixscope.analysis.fleet._tiers import write_host, write_through

EMPTY = 2**63 - 1  # an empty heap's top key


@step_piece
def step(i, tr, cost, sched, tiers, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """Run one step of replica ``i`` and advance its clock."""
    sets.log_now[0] = rep.now[i]  # what the step changes in the cache, it changes now
    preempted = rep.preemptions[i]
    if sched.engine != IDEAL:
        _grow(i, tr, sched, stride, req, rep, hp, sets, pool)
    else:
        _grow_footprint(i, tr, sched, req, rep, hp)
    d = rep.n_dec[i]
    left = sched.budget - d
    seconds = _decode_seconds(cost, d, rep.sum_ctx[i])
    tokens = d
    q = rep.qhead[i]
    while q != NONE and left > 0:
        if not req.started[q]:
            if d + rep.n_started[i] >= sched.max_seqs:
                break
            if sched.engine == VLLM and rep.preemptions[i] != preempted:
                break  # vLLM schedules no waiting request in a step that preempted
            if not _start(q, i, left, tr, cost, sched, tiers, stride, req, rep, sets, pool):
                break
            seconds += req.xfer[q]  # its prefix is loaded before its first chunk
        take = min(req.rem[q], left)
        if sched.engine == VLLM:  # a later chunk, past the blocks it holds, takes its own
            upto = req.ctx[q] + take
            held = req.pheld[q] + req.ans_own[q] + req.anon[q]
            if held * sched.block_size < upto and not _chunk(
                q, i, upto, tr, sched, stride, req, rep, hp, sets, pool
            ):
                break
        c0 = req.ctx[q]
        seconds += cost.c * c0 + cost.e * max(take, cost.k2) * c0 + cost.f * take * take
        tokens += take
        left -= take
        req.rem[q] -= take
        req.ctx[q] += take
        rep.outstanding[i] -= take
        if req.rem[q] > 0:
            if sched.engine == SGLANG:
                _pool.checkpoint(i, q, tr, stride, sched, req, pool)
            break
        q = req.qnext[q]
    seconds += cost.b * max(tokens, cost.k1)
    _advance(i, seconds, d, tokens, sched, rep, pool)
    _end_decodes(i, tr, sched, stride, req, rep, hp, sets, pool)
    _end_prefills(i, q, tr, sched, tiers, stride, req, rep, hp, sets, pool)


@step_piece
def coast(i, t, tr, cost, sched, tiers, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """Replica ``i``, if its queue is empty or its head must wait (:func:`_waits`), runs the
    steps before its clock reaches ``t`` that change nothing but sums: every one before the
    step where a decode ends or takes a block (the heaps' tops). Each is priced and counted by
    :func:`step`'s own pieces (:func:`_decode_seconds`, :func:`_advance`), so the clocks are
    bit for bit the step's; it skips only the checks that find nothing. Most steps are such:
    28 replicas on 8 hours of the generated week (496 K requests) run 29.9 M steps, most of a
    few decodes and nothing else (docs/fleet.md, "Speed"). Returns the steps run."""
    d = rep.n_dec[i]
    if d == 0 or not sched.coast:
        return 0
    base = i * sched.max_seqs
    top = min(
        _heap.top_key(hp.grow_key, hp.grow_n, i, base, EMPTY),
        _heap.top_key(hp.done_key, hp.done_n, i, base, EMPTY),
    )
    quiet = top // SEQ_SPAN - 1 - rep.steps[i]  # steps before the one that meets the top
    if quiet <= 0 or rep.now[i] >= t:
        return 0
    h = rep.qhead[i]
    if h != NONE and not _waits(h, i, d, tr, sched, tiers, stride, req, rep, sets, pool):
        return 0
    k = 0
    while k < quiet and rep.now[i] < t:
        sets.log_now[0] = rep.now[i]
        seconds = _decode_seconds(cost, d, rep.sum_ctx[i])
        seconds += cost.b * max(d, cost.k1)
        _advance(i, seconds, d, d, sched, rep, pool)
        k += 1
    return k


@step_piece
def _waits(h, i, d, tr, sched, tiers, stride, req, rep, sets, pool):  # type: ignore[no-untyped-def]
    """Whether the next step would leave the queue's head ``h`` waiting and change nothing
    else, until a decode ends or takes a block: ``h`` has not started and the step has no
    token or sequence left for it, or its whole sequence does not fit the free blocks, which
    only a decode's end or take changes. A full pool makes most of a pool's steps such.
    ``sglang`` refuses after its lookup, which splits a radix node: that split is made here,
    as the first of the steps coasted would make it, and each later one finds it made."""
    if req.started[h]:
        return False
    if sched.budget - d <= 0 or d + rep.n_started[i] >= sched.max_seqs:
        return True
    if sched.engine == IDEAL:
        return False
    if sched.engine == SGLANG:
        _admit.lookup(h, i, tr, sched, tiers, stride, sets, pool)
    return not _admit.whole_fits(h, i, tr, stride, sched, sets, pool, req)


@step_piece
def _decode_seconds(cost, d, sum_ctx):  # type: ignore[no-untyped-def]
    """A step's seconds before its chunks and its per-token term: ``d`` decodes whose
    contexts sum to ``sum_ctx`` (``stepcost.py``)."""
    return cost.a + cost.f * d + (cost.c + cost.e * max(1.0, cost.k2)) * sum_ctx


@step_piece
def _advance(i, seconds, d, tokens, sched, rep, pool):  # type: ignore[no-untyped-def]
    """A step of ``seconds`` ends: ``d`` decodes among its ``tokens`` counted, the clock
    moved."""
    _account(i, seconds, sched, rep, pool)
    rep.now[i] += seconds
    rep.busy[i] += seconds
    rep.steps[i] += 1
    rep.prefill_tok[i] += tokens - d
    rep.decode_tok[i] += d
    rep.sum_ctx[i] += d


@step_piece
def _start(q, i, left, tr, cost, sched, tiers, stride, req, rep, sets, pool):  # type: ignore[no-untyped-def]
    """Request ``q`` is scheduled, its first chunk at most ``left`` tokens: its blocks (under a
    pool, if they fit), its schedule number and, the first time, its start."""
    if sched.engine != IDEAL:
        if not _admit.admit(q, i, left, tr, cost, sched, tiers, stride, sets, pool, req, rep):
            return False
        n = tr.offsets.size - 1
        sentinel = n + i  # the newest running request is the list's last
        last = pool.rprev[sentinel]
        pool.rnext[last] = q
        pool.rprev[q] = last
        pool.rnext[q] = sentinel
        pool.rprev[sentinel] = q
    else:
        nb = tr.offsets[q + 1] - tr.offsets[q]
        total = max(nb, (tr.input_tokens[q] + sched.block_size - 1) // sched.block_size)
        req.pheld[q] = nb
        req.anon[q] = total - nb
        rep.footprint[i] += total
    if req.seq[q] == NONE:
        req.first_start[q] = rep.now[i]
    req.seq[q] = int(rep.clock[1])
    rep.clock[1] += 1
    req.started[q] = True
    rep.n_started[i] += 1
    return True


@step_piece
def _chunk(q, i, upto, tr, sched, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """``vllm``: request ``q``'s next chunk takes the blocks its first ``upto`` tokens need
    (``_admit.extend``), preempting the newest running request while they are not free;
    ``False`` once it preempted ``q`` itself (first come first served, ``q`` is the newest:
    the queue's head). Only a chunk past a request's first comes here. Inlined in the step: a
    call passes every array of every record apart. On the ×20 trace (8 × 16,000, one core)
    a ``vllm`` fleet takes 1.44 s under ``session`` and 1.19–1.28 s under ``least-loaded``
    where the call took 1.89–1.93 s for each, and the loop compiles in 111.5 s rather than
    97.4 s (benchmarks/RESULTS.md, stop 65). Inlining the pool's per-block ``take``, ``lock``
    and ``register`` as well took its compile to 6 min 16 s, for 1.20 s."""
    sentinel = tr.offsets.size - 1 + i
    while not _admit.extend(q, i, upto, tr, stride, sched, sets, pool, req, rep):
        v = pool.rprev[sentinel]
        preempt(v, i, tr, sched, stride, req, rep, hp, sets, pool)
        if v == q:
            return False
    return True


@step_piece
def _account(i, seconds, sched, rep, pool):  # type: ignore[no-untyped-def]
    """The step's share of the time-weighted running blocks and prefix-cache size."""
    if sched.engine == IDEAL:
        running, cached = rep.footprint[i], rep.size[i]
    else:
        running, cached = sched.capacity - pool.free_n[i], pool.cached_free[i]
    rep.running_s[i] += running * seconds
    rep.cached_s[i] += cached * seconds
    bucket = min(running // sched.hist_width, rep.hist.shape[1] - 1)
    rep.hist[i, bucket] += seconds


@step_piece
def _block_steps(q, tr, sched, req):  # type: ignore[no-untyped-def]
    """For decoding request ``q``: the step at which it next needs a block (its context passes
    the blocks it holds), and the last step of its decode."""
    nb = tr.offsets[q + 1] - tr.offsets[q]
    inp, g = tr.input_tokens[q], req.gen[q]
    at = (nb + req.anon[q] + req.ans_own[q]) * sched.block_size - inp - g + req.dec_start[q] + 2
    return at, req.dec_start[q] + tr.output_tokens[q] - g


@step_piece
def _push_grow(q, i, tr, sched, req, hp):  # type: ignore[no-untyped-def]
    """The decode's next block event: the block it takes, or under ``vllm``, first, the step
    that computes the last token of the block it holds last (the step before the take, maybe
    its decode's last), when that block is the next of its answer's positions
    (:func:`_pool.filled`)."""
    at, end = _block_steps(q, tr, sched, req)
    fill = False
    if sched.engine == VLLM:
        j = req.anon[q] + req.ans_own[q] - 1
        placed = (
            j >= 0 and j == req.ans_n[q] and tr.answer_offsets[q] + j < tr.answer_offsets[q + 1]
        )
        fill = placed and at - 1 <= end
    req.fill[q] = fill
    if fill:
        at -= 1
    if at <= end:
        base = i * sched.max_seqs
        key = at * SEQ_SPAN + req.seq[q]
        _heap.push(hp.grow_key, hp.grow_req, hp.grow_pos, hp.grow_n, i, base, key, q)


@step_piece
def _grow_footprint(i, tr, sched, req, rep, hp):  # type: ignore[no-untyped-def]
    """``ideal``: the decodes' new blocks, counted but taken from nothing."""
    base = i * sched.max_seqs
    due = (rep.steps[i] + 1) * SEQ_SPAN + SEQ_SPAN - 1
    while _heap.top_key(hp.grow_key, hp.grow_n, i, base, EMPTY) <= due:
        q = hp.grow_req[base]
        _heap.remove(hp.grow_key, hp.grow_req, hp.grow_pos, hp.grow_n, i, base, q)
        req.anon[q] += 1
        rep.footprint[i] += 1
        _push_grow(q, i, tr, sched, req, hp)


@step_piece
def _grow(i, tr, sched, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """Under a pool: each growing decode takes a block, preempting the newest when none is
    free (vLLM's ``schedule``: a running request that cannot allocate preempts the last of
    ``running``, itself included)."""
    base = i * sched.max_seqs
    due = (rep.steps[i] + 1) * SEQ_SPAN + SEQ_SPAN - 1
    sentinel = tr.offsets.size - 1 + i
    while _heap.top_key(hp.grow_key, hp.grow_n, i, base, EMPTY) <= due:
        q = hp.grow_req[base]
        _heap.remove(hp.grow_key, hp.grow_req, hp.grow_pos, hp.grow_n, i, base, q)
        if req.fill[q]:  # its last block fills in this step: vLLM caches it
            _pool.filled(i, q, tr, stride, sched, sets, pool, req)
            _push_grow(q, i, tr, sched, req, hp)
            continue
        gone = False
        while pool.free_n[i] == 0:
            v = pool.rprev[sentinel]
            preempt(v, i, tr, sched, stride, req, rep, hp, sets, pool)
            if v == q:
                gone = True
                break
        if gone:
            continue
        _pool.take(i, q, stride, sched, tr.parent, sets, pool, rep)
        req.anon[q] += 1
        rep.footprint[i] += 1
        _push_grow(q, i, tr, sched, req, hp)


@step_piece
def preempt(v, i, tr, sched, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """Request ``v`` gives its blocks back and waits at the front of the queue (behind a
    part-prefilled head, which vLLM keeps running), to recompute its prompt and the tokens it
    generated; its prefix may still be cached then."""
    pool.rnext[pool.rprev[v]] = pool.rnext[v]
    pool.rprev[pool.rnext[v]] = pool.rprev[v]
    base = i * sched.max_seqs
    if hp.done_pos[v] >= 0:  # decoding
        _heap.remove(hp.done_key, hp.done_req, hp.done_pos, hp.done_n, i, base, v)
        _heap.remove(hp.grow_key, hp.grow_req, hp.grow_pos, hp.grow_n, i, base, v)
        g = req.gen[v] + rep.steps[i] - req.dec_start[v]
        rep.sum_ctx[i] -= tr.input_tokens[v] + g
        rep.n_dec[i] -= 1
        req.gen[v] = g
        computed = tr.input_tokens[v] + g - 1  # the last token sampled has no KV yet
        h = rep.qhead[i]
        if h != NONE and req.started[h]:
            req.qnext[v] = req.qnext[h]
            req.qnext[h] = v
            if rep.qtail[i] == h:
                rep.qtail[i] = v
        else:
            req.qnext[v] = h
            rep.qhead[i] = v
            if h == NONE:
                rep.qtail[i] = v
    else:  # the part-prefilled head
        rep.n_started[i] -= 1
        rep.outstanding[i] -= req.rem[v]
        computed = req.ctx[v]
    req.started[v] = False
    _free(v, i, computed, False, tr, sched, stride, req, rep, sets, pool)
    req.rem[v] = tr.input_tokens[v] + req.gen[v]
    rep.outstanding[i] += req.rem[v]
    rep.preemptions[i] += 1


@step_piece
def _free(q, i, computed, done, tr, sched, stride, req, rep, sets, pool):  # type: ignore[no-untyped-def]
    """Request ``q`` gives its blocks back, ``computed`` of its tokens with their KV: of its
    blocks past the prompt's, those full of computed tokens (its generated ones) are cached as
    the engines cache them, under its answer's ids where it reached them or, once it is
    ``done``, where its next turn names them (``structure/answers.py``); the rest are not."""
    start, end = tr.offsets[q], tr.offsets[q + 1]
    tail = req.anon[q] + req.ans_own[q]
    rep.footprint[i] -= req.pheld[q] + tail
    if sched.engine != IDEAL:
        full = min(max(computed // sched.block_size - (end - start), 0), tail)
        _pool.release(i, q, full, done, tr, stride, sched, sets, pool, req, rep.now.size)
    req.pheld[q] = 0
    req.anon[q] = 0


@step_piece
def _finish(q, i, tr, sched, stride, req, rep, sets, pool):  # type: ignore[no-untyped-def]
    rep.inflight[i] -= 1
    req.done_at[q] = rep.now[i]
    computed = tr.input_tokens[q] + max(tr.output_tokens[q], 1) - 1  # the last token: no KV
    _free(q, i, computed, True, tr, sched, stride, req, rep, sets, pool)
    if sched.engine != IDEAL:
        pool.rnext[pool.rprev[q]] = pool.rnext[q]
        pool.rprev[pool.rnext[q]] = pool.rprev[q]


@step_piece
def _end_decodes(i, tr, sched, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """Decodes whose last token came out in this step, in schedule order."""
    base = i * sched.max_seqs
    due = rep.steps[i] * SEQ_SPAN + SEQ_SPAN - 1
    while _heap.top_key(hp.done_key, hp.done_n, i, base, EMPTY) <= due:
        q = hp.done_req[base]
        _heap.remove(hp.done_key, hp.done_req, hp.done_pos, hp.done_n, i, base, q)
        _heap.remove(hp.grow_key, hp.grow_req, hp.grow_pos, hp.grow_n, i, base, q)
        rep.sum_ctx[i] -= tr.input_tokens[q] + tr.output_tokens[q]
        rep.n_dec[i] -= 1
        _finish(q, i, tr, sched, stride, req, rep, sets, pool)


@step_piece
def _end_prefills(i, q, tr, sched, tiers, stride, req, rep, hp, sets, pool):  # type: ignore[no-untyped-def]
    """The queue's requests before ``q`` completed their prefill in this step: a token out
    (the first: their TTFT), then decoding or done; under a pool with tiers, each prompt
    computed is written to them (``_tiers.write_through``, ``sglang``: ``write_host``)."""
    base = i * sched.max_seqs
    h = rep.qhead[i]
    while h != q:
        nx = req.qnext[h]
        rep.n_started[i] -= 1
        if sched.engine == SGLANG and tiers.dram_blocks > 0:
            write_host(tr.blocks, tr.offsets[h], tr.offsets[h + 1], i, stride, tiers, sets, rep)
        elif sched.engine != IDEAL and (tiers.dram_blocks > 0 or tiers.store_blocks >= 0):
            write_through(tr.blocks, tr.offsets[h], tr.offsets[h + 1], i, stride, tiers, sets, rep)
        if req.gen[h] == 0:
            req.ttft[h] = rep.now[i] - tr.arrival[h]
        req.gen[h] += 1
        more = tr.output_tokens[h] - req.gen[h]
        if more > 0:
            req.dec_start[h] = rep.steps[i]
            key = (rep.steps[i] + more) * SEQ_SPAN + req.seq[h]
            _heap.push(hp.done_key, hp.done_req, hp.done_pos, hp.done_n, i, base, key, h)
            rep.n_dec[i] += 1
            rep.sum_ctx[i] += tr.input_tokens[h] + req.gen[h]
            _push_grow(h, i, tr, sched, req, hp)
        else:
            _finish(h, i, tr, sched, stride, req, rep, sets, pool)
        h = nx
    rep.qhead[i] = q
    if q == NONE:
        rep.qtail[i] = NONE

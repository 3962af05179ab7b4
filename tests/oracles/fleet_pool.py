"""The ``vllm`` and ``sglang`` engines in plain Python: the test oracle for the compiled KV pool
(``_pool.py``) and the scheduler's preemption (``_sched.py``).

Written for obviousness, not speed. Each replica's pool is a dict of the hashes it holds
(block -> how many running requests hold it) and the count of its free blocks, recounted:

- ``vllm``: the free queue is an ``OrderedDict`` in eviction order, hashless blocks as
  entries of their own; a release appends the request's hashless blocks, then its prompt's
  from the deepest; an allocation pops the first entry (evicting its hash); a hit takes its
  entry out. An answer block a decode fills under an id the replica holds already is a
  second copy of that id (``dups``: vLLM caches it too, never de-duplicating), which no
  lookup finds while the first is cached; when the first is evicted, the copy takes its
  place;
- ``sglang``: hashless free blocks are counted; an allocation evicts, among the free hashed
  blocks no cached block extends, the one released longest ago (ties: the smaller id).

The schedule (docs/fleet.md, "Engines"): a request is looked up when first scheduled, if
its whole sequence's blocks fit; ``sglang`` takes them all then, ``vllm`` its cached leading
run then and the rest chunk by chunk, a chunk that finds too few free blocks preempting its
own request (the newest running one), and a step that preempted admits nobody; each step,
the decodes that outgrow their blocks take one each, oldest schedule first, preempting the
newest running request while none is free.

Tiers (``vllm``): each replica's DRAM tier and the fleet's store are ``OrderedDict`` LRU
lists, least recent first; a computed prompt is written to both, deepest block first (a
block held already moves to the end), and they are cut from the front. A lookup goes on
past the GPU's run through blocks either holds, loaded at their links' speed before the
request's first chunk.

Tiers (``sglang``, HiCache): ``dram`` is the set of blocks host memory holds, and
``host_lru`` those of them the GPU has evicted, in that order: the only ones host memory
evicts. A computed prompt is written to host memory (then the store) until it is full with
nothing of its own to evict.

Prefix caching off (``Fleet.prefix_caching`` False): every lookup is a block of its own
(``trace/tail.py``'s fresh span), and every position a request holds is a hashless block,
given back as one; no answer is cached.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.fleet.run import (
    Engine,
    Fleet,
    FleetOutcome,
    Traffic,
    histogram_width,
)
from prefixscope.analysis.structure.answers import routed_answer_blocks
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.tail import span
from tests.oracles.fleet import _Decoding, _prefill_alone, _Request, route
from tests.oracles.fleet_parts import (
    HIST_BUCKETS,
    _fixed_routing,
    blocks_for,
    outcome_of,
)
from tests.oracles.fleet_replica import _PoolReplica


def reference_pool_fleet(
    trace: Trace, traffic: Traffic, fleet: Fleet, engine: Engine
) -> FleetOutcome:
    """The fleet under ``fleet.engine`` (``vllm`` or ``sglang``), as ``simulate_fleet`` runs it."""
    fleet.check()
    engine.check()
    n_rep, settings = fleet.replicas, engine.routers
    if not fleet.prefix_caching:
        trace = span(trace, 0, trace.n_requests, fresh=True)
    fixed = _fixed_routing(trace, traffic, fleet.router, n_rep, settings)
    trace = full_blocks_only(trace)  # both engines cache full blocks only
    arrival = trace.times / fleet.load_scale
    output = np.asarray(traffic.output_tokens, np.int64)
    requests = [
        _Request(
            arrival=float(arrival[r]),
            blocks=[int(b) for b in trace.blocks[trace.offsets[r] : trace.offsets[r + 1]]],
            input_tokens=int(trace.input_tokens[r]),
            output_tokens=int(output[r]),
            recomputes_last=bool(trace.recomputes_last_block[r]),
        )
        for r in range(trace.n_requests)
    ]
    gen = [0] * len(requests)
    seq = [-1] * len(requests)
    replicas = [_PoolReplica(fleet.capacity_blocks, fleet.engine == "sglang") for _ in range(n_rep)]
    for rep in replicas:
        for _ in range(0 if rep.sglang else rep.capacity):
            rep.anon_ids += 1
            rep.free_queue[("anon", rep.anon_ids)] = None
        rep.anon_free = rep.capacity if rep.sglang else 0
    width = histogram_width(trace, output, fleet, engine)
    # the next turns come from the turn inference (``structure/answers.py``), the ids plainly
    answers: list[list[int]] = [[] for _ in requests]
    if engine.cache_answers and fleet.prefix_caching:
        routed = np.asarray(fixed) if fixed is not None and len(fixed) else None
        found = routed_answer_blocks(trace, output, routed)
        for a in np.flatnonzero(found.count):
            b, first = int(found.child[a]), int(found.first[a])
            answers[a] = requests[b].blocks[first : first + int(found.count[a])]
    tiers = fleet.tiers
    store: OrderedDict[int, None] | None = None if tiers.store_blocks is None else OrderedDict()
    per_token = [0.0, *tiers.per_token_s(engine.kv_bytes_per_token)]
    ctx = _Context(
        trace, engine, requests, gen, seq, width, [0], answers, store, per_token,
        tiers.dram_blocks, tiers.store_blocks, fleet.prefix_caching,
    )  # fmt: skip
    clock = [requests[0].arrival if requests else 0.0]
    for r, req in enumerate(requests):
        for rep in replicas:
            while rep.now < req.arrival and rep.has_work():
                _step(rep, ctx)
            rep.now = max(rep.now, req.arrival)
        i = route(r, req, replicas, requests, fleet, settings, fixed, trace.block_size, clock)
        req.replica = i
        req.to_prefill = req.input_tokens
        replicas[i].queue.append(r)
    for rep in replicas:
        while rep.has_work():
            _step(rep, ctx)

    return outcome_of(fleet, arrival, requests, replicas, width)


@dataclass
class _Context:
    trace: Trace
    engine: Engine
    requests: list[_Request]
    gen: list[int]
    seq: list[int]
    width: int
    schedules: list[int]
    answers: list[list[int]]  # per request, its next turn's ids for its answer
    store: OrderedDict[int, None] | None  # the fleet's store, LRU first
    per_token: list[float]  # seconds to copy a token from HBM, DRAM, the store
    dram_blocks: int  # each replica's DRAM tier (0: none)
    store_blocks: int | None  # the store (None: none)
    caching: bool = True  # False: every block hashless


def _span(q: int, rep: _PoolReplica, c: _Context) -> tuple[int, int]:
    """The answer positions a readmission holds (vllm) and all the request's positions."""
    req, bs = c.requests[q], c.trace.block_size
    length, nb = req.input_tokens + c.gen[q], len(req.blocks)
    m = min(len(c.answers[q]), max(length // bs - nb, 0)) if c.gen[q] and not rep.sglang else 0
    return m, max(nb + m, -(-length // bs))


def _hold(q: int, rep: _PoolReplica, c: _Context, lo: int, hi: int, dry: bool = False) -> int:
    """Positions ``lo .. hi`` of request ``q`` (its prompt's blocks, a readmission's answer
    ids, then hashless ones): the free blocks they take; unless ``dry``, held: the cached
    ones locked first, then new ones taken and named."""
    req = c.requests[q]
    nb, (m, _) = len(req.blocks), _span(q, rep, c)
    if not c.caching:
        if not dry:
            for _ in range(hi - lo):
                rep.take(q, c.trace.parent)
            rep.pheld[q] = max(rep.pheld.get(q, 0), min(hi, nb))
            rep.held.setdefault(q, []).extend([None] * max(hi - max(lo, nb), 0))
            rep.reached[q] = 0
        return hi - lo
    answer = c.answers[q]
    prompt = [req.blocks[j] for j in range(lo, min(hi, nb)) if req.blocks[j] not in req.blocks[:j]]
    ids = prompt + answer[max(lo, nb) - nb : max(min(hi, nb + m), nb) - nb]
    anon = max(hi - max(lo, nb + m), 0)
    need = anon + sum(1 for b in ids if rep.cache.get(b, 0) == 0)
    if dry:
        return need
    for b in ids:
        if b in rep.cache:
            rep.lock(b)
    prev = None  # the previous position's block, where this call cached it
    for j in range(lo, min(hi, nb)):
        b = req.blocks[j]
        if b in rep.cache:
            prev = None
            continue
        rep.take(q, c.trace.parent)
        rep.cache[b] = 1
        rep.host_lru.pop(b, None)  # sglang: on the GPU again, not host memory's to evict
        if rep.sglang:  # one insert: one radix node, along the chain
            rep.joins(b, prev if prev is not None and c.trace.parent[b] == prev else None)
        prev = b
    for b in ids[len(prompt) :]:
        if b not in rep.cache:
            rep.take(q, c.trace.parent)
            rep.cache[b] = 1
    for _ in range(anon):
        rep.take(q, c.trace.parent)
    rep.pheld[q] = max(rep.pheld.get(q, 0), min(hi, nb))
    rep.held.setdefault(q, []).extend([*ids[len(prompt) :], *([None] * anon)])
    rep.reached[q] = sum(1 for b in rep.held[q] if b is not None)
    return need


def _extend(q: int, rep: _PoolReplica, c: _Context, upto: int) -> bool:
    """vllm: the blocks the request's first ``upto`` tokens need, if they are free."""
    have = rep.pheld[q] + len(rep.held[q])
    want = min(_span(q, rep, c)[1], -(-upto // c.trace.block_size))
    if want > have and _hold(q, rep, c, have, want, dry=True) > rep.free():
        return False
    if want > have:
        _hold(q, rep, c, have, want)
    return True


def _admit(q: int, rep: _PoolReplica, c: _Context) -> bool:
    req, bs = c.requests[q], c.trace.block_size
    length = req.input_tokens + c.gen[q]
    nb = len(req.blocks)
    answer = c.answers[q]
    m, total = _span(q, rep, c)  # vllm looks a readmission's known answer blocks up too
    k = 0
    while k < nb and req.blocks[k] in rep.cache:
        k += 1
    kt = k  # on through the tiers
    while kt < nb and (req.blocks[kt] in rep.dram or req.blocks[kt] in (c.store or ())):
        kt += 1
    matched = kt - (1 if req.recomputes_last and kt >= nb and kt > 0 else 0)
    if rep.sglang and matched > 0:  # SGLang's lookup splits the node it ends in
        rep.split(req.blocks[matched - 1])
    k_ans = 0
    if k == nb:
        while k_ans < min(m, (length - 1) // bs - nb) and answer[k_ans] in rep.cache:
            k_ans += 1
    if _hold(q, rep, c, 0, total, dry=True) > rep.free():
        return False
    rep.pheld[q], rep.held[q], rep.dup_held[q] = 0, [], set()
    # sglang holds every position now; vllm its cached leading run, its chunks the rest
    _hold(q, rep, c, 0, total if rep.sglang else kt + k_ans)
    inp = req.input_tokens

    def alone(j: int) -> float:  # the prompt alone in a step, its first j blocks served
        fresh = max(inp - min(j * bs, inp), 1)
        return _prefill_alone(c.engine.cost, fresh, max(inp - fresh, 0))

    first = c.gen[q] == 0 and c.seq[q] == -1
    if c.gen[q] == 0:
        hit = min(matched * bs, inp)
        new = max(inp - hit, 1)
        if not first:  # a lookup after a preemption: counted apart, as vLLM does
            req.preempted = [req.preempted[0] + 1, req.preempted[1] + inp, req.preempted[2] + hit]
        else:  # the first admission's lookup alone is the request's hit
            g = min(k, matched)
            req.hit_blocks, req.hit_tokens = kt, hit
            req.source_tokens = [min(g * bs, inp), 0, 0]
            req.no_cache = _prefill_alone(c.engine.cost, max(inp, 1), 0)
            req.source_saved = [req.no_cache - alone(g), 0.0, 0.0]
    else:
        new = length - min(kt * bs, inp) - k_ans * bs
        found = length - new
        req.preempted = [req.preempted[0] + 1, req.preempted[1] + length, req.preempted[2] + found]
    req.transfer = 0.0  # the blocks the tiers hand over, copied before its first chunk
    for j in range(k, matched if c.gen[q] == 0 else kt):
        tokens = min(max(inp - j * bs, 0), bs)
        source = 1 if req.blocks[j] in rep.dram else 2
        copy = c.per_token[source] * tokens
        req.transfer += copy
        if first:
            req.source_tokens[source] += tokens
            req.source_saved[source] += alone(j) - alone(j + 1) - copy
    req.to_prefill, req.context = new, max(length - new, 0)
    return True


def _preempt(v: int, rep: _PoolReplica, c: _Context) -> None:
    req = c.requests[v]
    rep.running.remove(v)
    decoding = v in rep.decoding
    if decoding:
        c.gen[v] = req.output_tokens - rep.decoding.pop(v).left
        head = rep.queue[0] if rep.queue else None
        at = 1 if head is not None and c.requests[head].started else 0
        rep.queue.insert(at, v)
    computed = req.input_tokens + c.gen[v] - 1 if decoding else req.context
    req.started = False
    _release(v, rep, c, computed, done=False)
    req.to_prefill = req.input_tokens + c.gen[v]
    rep.preemptions += 1


def _release(r: int, rep: _PoolReplica, c: _Context, computed: int, done: bool) -> None:
    req, tail = c.requests[r], rep.held.pop(r)
    full = min(max(computed // c.trace.block_size - len(req.blocks), 0), len(tail))
    answer, copies = (c.answers[r] if done else None), rep.dup_held.pop(r)
    if rep.sglang and done and full > 0 and req.blocks and c.caching:
        rep.split(req.blocks[-1])  # SGLang's split_prompt
    prompt = req.blocks[: rep.pheld.pop(r)]
    if not c.caching:  # hashless, the prompt's positions too
        prompt, tail = [], [None] * (len(prompt) + len(tail))
    rep.release(prompt, tail, full, answer, c.trace.parent, rep.reached.pop(r), copies)


def _grow(rep: _PoolReplica, c: _Context) -> None:
    """Decodes that outgrow their blocks in this step take one each, oldest schedule first."""
    bs = c.trace.block_size
    for q in sorted(rep.decoding, key=lambda r: c.seq[r]):
        if q not in rep.decoding:
            continue  # preempted for an older one
        req = c.requests[q]
        if not rep.sglang and rep.decoding[q].context % bs == 0:
            _filled(q, rep, c)  # the step computes the last token of its last block
        if blocks_for(req, rep.decoding[q].context, bs) <= len(req.blocks) + len(rep.held[q]):
            continue
        while rep.free() == 0 and q in rep.running:
            _preempt(max(rep.running, key=lambda r: c.seq[r]), rep, c)
        if q in rep.running:
            rep.take(q, c.trace.parent)
            rep.held[q].append(None)


def _filled(q: int, rep: _PoolReplica, c: _Context) -> None:
    """vllm: the request's last block fills in this step; if it is the next answer position, it
    takes that id unless the replica lacks its parent; where the replica holds that id
    already, the block is its second copy (one at most: a third stays hashless)."""
    tail, answer, j = rep.held[q], c.answers[q], len(rep.held[q]) - 1
    if j < 0 or j != rep.reached[q] or j >= len(answer):
        return
    rep.reached[q] += 1
    b, parent = answer[j], int(c.trace.parent[answer[j]])
    if parent >= 0 and parent not in rep.cache:
        return
    if b not in rep.cache:
        rep.cache[b] = 1
        tail[j] = b
    elif b not in rep.dups:
        rep.dups[b] = 1
        rep.dup_holder[b] = (q, j)
        rep.dup_held[q].add(j)
        tail[j] = b


def _step(rep: _PoolReplica, c: _Context) -> None:
    preempted = rep.preemptions
    _grow(rep, c)
    a, b, cc, e, f, k1, k2 = (float(x) for x in c.engine.cost.array())
    d = len(rep.decoding)
    seconds = a + f * d + (cc + e * max(1.0, k2)) * sum(x.context for x in rep.decoding.values())
    tokens, left = d, c.engine.budget_tokens - d
    running = d + sum(c.requests[q].started for q in rep.queue)
    through = 0
    for q in rep.queue:
        if left <= 0:
            break
        req = c.requests[q]
        if not req.started:
            if running >= c.engine.max_seqs:
                break
            if not rep.sglang and rep.preemptions != preempted:
                break  # vLLM admits no waiting request in a step that preempted
            if not _admit(q, rep, c):
                break
            if c.seq[q] == -1:
                req.first_start = rep.now
            c.seq[q] = c.schedules[0]
            c.schedules[0] += 1
            seconds += req.transfer
            req.started = True
            rep.running.append(q)
            running += 1
        take = min(req.to_prefill, left)
        if not rep.sglang and not _extend(q, rep, c, req.context + take):
            # its chunk's blocks are not free: it is the newest running request, preempted
            assert max(rep.running, key=lambda r: c.seq[r]) == q
            _preempt(q, rep, c)
            break
        seconds += cc * req.context + e * max(take, k2) * req.context + f * take * take
        tokens += take
        left -= take
        req.to_prefill -= take
        req.context += take
        if req.to_prefill > 0:
            j = req.context // c.trace.block_size  # SGLang's checkpoint after each chunk
            if rep.sglang and 0 < j < len(req.blocks) and c.caching:
                rep.split(req.blocks[j - 1])
            break
        through += 1
    seconds += b * max(tokens, k1)
    held = rep.capacity - rep.free()
    rep.running_s += held * seconds
    rep.cached_s += rep.cached_free() * seconds
    bucket = min(held // c.width, HIST_BUCKETS - 1)
    rep.hist[bucket] = rep.hist.get(bucket, 0.0) + seconds
    rep.now += seconds
    rep.busy += seconds
    rep.steps += 1
    rep.prefill_tokens += tokens - d
    rep.decode_tokens += d
    for r in sorted(rep.decoding, key=lambda r: c.seq[r]):
        dec = rep.decoding[r]
        dec.context += 1
        dec.left -= 1
        if dec.left == 0:
            del rep.decoding[r]
            _finish(r, rep, c)
    for _ in range(through):
        r = rep.queue.popleft()
        req = c.requests[r]
        if rep.sglang and c.dram_blocks:
            _write_host(req.blocks, rep, c)
        elif not rep.sglang:
            _write_through(req.blocks, rep, c)
        if c.gen[r] == 0:
            req.ttft = rep.now - req.arrival
        c.gen[r] += 1
        if req.output_tokens - c.gen[r] > 0:
            rep.decoding[r] = _Decoding(req.input_tokens + c.gen[r], req.output_tokens - c.gen[r])
        else:
            _finish(r, rep, c)


def _write_host(blocks: list[int], rep: _PoolReplica, c: _Context) -> None:
    """sglang: a computed prompt into host memory, parents first, while it has room or a block
    the GPU evicted to evict (the one it evicted first); what was written on into the store."""
    written = []
    for b in blocks:
        if b not in rep.dram:
            if len(rep.dram) >= c.dram_blocks:
                if not rep.host_lru:
                    break
                gone, _ = rep.host_lru.popitem(last=False)
                del rep.dram[gone]
            rep.dram[b] = None
        written.append(b)
    _write_through(written, rep, c, dram=False)


def _write_through(blocks: list[int], rep: _PoolReplica, c: _Context, dram: bool = True) -> None:
    """A computed prompt into the replica's DRAM tier (unless not ``dram``) and the store,
    deepest first."""
    for tier, limit in ((rep.dram if dram else None, c.dram_blocks), (c.store, c.store_blocks)):
        if tier is None or not limit:
            continue
        for b in reversed(blocks):
            tier[b] = None
            tier.move_to_end(b)
        while len(tier) > limit:
            tier.popitem(last=False)


def _finish(r: int, rep: _PoolReplica, c: _Context) -> None:
    req = c.requests[r]
    req.done_at = rep.now
    rep.running.remove(r)
    computed = req.input_tokens + max(req.output_tokens, 1) - 1  # the last token: no KV
    _release(r, rep, c, computed, done=True)

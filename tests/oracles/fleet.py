"""The fleet loop in plain Python: the test oracle for the compiled one (``_kernel.py``).

Written for obviousness, not speed. Each replica is an object holding its cache and its
router tree (``OrderedDict``s in eviction order, the victim first), its queue (a ``deque``,
first come first served) and its decoding requests (a dict of request -> context and tokens
still to decode). Loads are recounted from that state whenever a router reads them, rather
than kept as running sums, so the kernel's counters are checked, not copied.

The rules, as ``_kernel.py`` states them:

- requests in arrival order (``times / load_scale``); before request ``r`` at ``t`` is routed,
  every replica runs the steps that start strictly before ``t`` (a step runs only while the
  replica has queued or decoding work), then an idle replica's clock moves up to ``t``;
- the router picks a replica; ties among equal values go to the first replica counting from
  ``r mod N``;
- the replica's cache is looked up (the leading run of cached blocks, extended through its
  DRAM tier and the shared store when there are such, cut where recomputing beats copying),
  its blocks touched deepest first (LRU refreshes a hit, FIFO does not) and the oldest evicted
  while over capacity (``lfu``, ``s3fifo``, ``pinned``: the policy's own cache touched and
  evicted), the victims into DRAM, in the order they left, when there is a DRAM tier; the
  store takes what was computed and refreshes what it served (but under FIFO); the request
  queues ``max(1, input - hit tokens)`` tokens to prefill, and pays its copies in the step of
  its first chunk;
- a step: every decoding request adds one token; then the queue fills what is left of the
  token budget, first come first served, a prefill split across steps when it does not fit;
  a request not yet started joins only while fewer than ``max_seqs`` are running (decoding,
  or started and not yet through their prefill, this step's included);
- a request's first token is out when the step holding its last prefill chunk ends; it then
  decodes ``output - 1`` more tokens, one per step, at a context that starts at
  ``input + 1`` and grows by one per step.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from prefixscope.analysis.fleet._records import HIST_BUCKETS
from prefixscope.analysis.fleet.routers import RouterSettings
from prefixscope.analysis.fleet.run import Engine, Fleet, FleetOutcome, Traffic, histogram_width
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.trace.csr import Trace
from tests.oracles.fleet_parts import (
    _argmin,
    _decode_context,
    _evict,
    _fixed_routing,
    _leading_run,
    _queued_prefill,
    _touch,
    footprint,
    outcome_of,
)
from tests.oracles.policies import (
    LFUCache,
    PinnedLRU,
    S3FIFOCache,
    _parents,
    reference_replay,
)


@dataclass
class _Request:
    arrival: float
    blocks: list[int]
    input_tokens: int
    output_tokens: int
    recomputes_last: bool
    replica: int = -1
    hit_blocks: int = 0
    hit_tokens: int = 0
    to_prefill: int = 0  # prefill tokens still to compute
    context: int = 0  # positions before its next prefill chunk
    started: bool = False
    ttft: float = 0.0
    first_start: float = 0.0
    done_at: float = 0.0
    transfer: float = 0.0  # seconds copying its served prefix from DRAM or the store
    sources: list[int] = field(default_factory=list)  # tier of each block of the leading run
    source_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    source_saved: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    no_cache: float = 0.0
    # lookups after a preemption: how many, tokens looked up, tokens found (pools only)
    preempted: list[int] = field(default_factory=lambda: [0, 0, 0])


@dataclass
class _Decoding:
    context: int  # positions the next decode step attends to
    left: int  # tokens still to decode


@dataclass
class _Replica:
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    last: dict[int, float] = field(default_factory=dict)  # a block's last use (ttl)
    dram: OrderedDict[int, None] = field(default_factory=OrderedDict)
    tree: OrderedDict[int, None] = field(default_factory=OrderedDict)
    queue: deque[int] = field(default_factory=deque)
    decoding: dict[int, _Decoding] = field(default_factory=dict)
    now: float = 0.0
    busy: float = 0.0
    steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    filled_at: int = -1
    running_s: float = 0.0  # Σ blocks the running requests need × step seconds
    cached_s: float = 0.0  # Σ blocks cached × step seconds
    hist: dict[int, float] = field(default_factory=dict)  # step seconds by running bucket

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.decoding)


def reference_fleet(trace: Trace, traffic: Traffic, fleet: Fleet, engine: Engine) -> FleetOutcome:
    """The fleet over the whole trace, as :func:`~prefixscope.analysis.fleet.run.simulate_fleet`
    computes it (fixed routers included: their routing is computed here too), with its DRAM
    tier per replica and shared store when it has them."""
    fleet.check()
    engine.check()
    tiers = fleet.tiers
    store: OrderedDict[int, None] | None = None if tiers.store_blocks is None else OrderedDict()
    per_token = [0.0, *tiers.per_token_s(engine.kv_bytes_per_token)]
    n_rep = fleet.replicas
    settings = engine.routers
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
    replicas = [_Replica() for _ in range(n_rep)]
    own = fleet.policy in ("lfu", "s3fifo") or (fleet.policy == "pinned" and not fleet.replayed)
    if own:  # the policy's own cache per replica (pinned: the --pin file's blocks on each)
        parent = _parents([req.blocks for req in requests])
        mask = fleet.pins.masks()(trace) if fleet.policy == "pinned" else np.zeros(0)
        pins = frozenset(np.flatnonzero(mask).tolist())
        cap = fleet.capacity_blocks
        make = {
            "lfu": lambda: LFUCache(cap),
            "s3fifo": lambda: S3FIFOCache(cap, parent),
            "pinned": lambda: PinnedLRU(cap, pins),
        }[fleet.policy]
        for rep in replicas:
            rep.cache = make()  # type: ignore[assignment]
    fixed = _fixed_routing(trace, traffic, fleet.router, n_rep, settings)
    given, replayed_filled = _replayed(fleet, requests, fixed)
    shape = (trace.block_size, histogram_width(trace, output, fleet, engine))
    clock = [requests[0].arrival if requests else 0.0]  # the router trees' last eviction

    for r, req in enumerate(requests):
        t = req.arrival
        for rep in replicas:
            while rep.now < t and rep.has_work():
                _step(rep, requests, engine, shape)
            rep.now = max(rep.now, t)

        if fleet.policy == "ttl":  # every replica drops what has idled past the ttl
            for rep in replicas:
                for b in [b for b in rep.cache if t - rep.last[b] > fleet.ttl_s]:
                    del rep.cache[b]

        i = route(r, req, replicas, requests, fleet, settings, fixed, trace.block_size, clock)

        rep = replicas[i]
        req.replica = i
        run = None if given is None else given[r]  # replayed apart: no cache kept here
        has_dram = tiers.dram_blocks > 0
        _serve(req, rep, store, trace.block_size, engine.cost, per_token, has_dram, run)
        if given is not None:
            pass
        elif own:  # over a DRAM tier as the lists are: what DRAM holds moves up, victims down
            for b in req.blocks:
                if b not in rep.cache:
                    rep.dram.pop(b, None)
            rep.cache.touch(req.blocks)  # type: ignore[attr-defined]
            for victim in rep.cache.evict():  # type: ignore[attr-defined]
                if has_dram:
                    rep.dram[victim] = None
            _evict(rep.dram, tiers.dram_blocks)
        elif tiers.dram_blocks > 0:  # exclusive: a DRAM hit moves up, HBM's victims move down
            for b in reversed(req.blocks):
                if b in rep.cache:
                    if fleet.policy == "lru":
                        rep.cache.move_to_end(b)
                    continue
                rep.dram.pop(b, None)
                rep.cache[b] = None
            while len(rep.cache) > fleet.capacity_blocks:
                victim, _ = rep.cache.popitem(last=False)
                rep.dram[victim] = None
            _evict(rep.dram, tiers.dram_blocks)
        else:
            _touch(rep.cache, req.blocks, refresh=fleet.policy in ("lru", "ttl"))
            _evict(rep.cache, fleet.capacity_blocks)
            for b in req.blocks:
                rep.last[b] = t
        if given is None and rep.filled_at == -1 and len(rep.cache) >= fleet.capacity_blocks:
            rep.filled_at = r
        if store is not None:  # what was computed is written; what the store served is used
            for j in reversed(range(len(req.blocks))):
                b = req.blocks[j]
                if j < req.hit_blocks and req.sources[j] != 2:
                    continue
                if b in store:
                    if fleet.policy != "fifo":  # its hits refresh nothing, there nor here
                        store.move_to_end(b)
                else:
                    store[b] = None
            _evict(store, tiers.store_blocks)
        req.to_prefill = max(req.input_tokens - req.hit_tokens, 1)
        req.context = max(req.input_tokens - req.to_prefill, 0)
        rep.queue.append(r)

    for rep in replicas:  # drain
        while rep.has_work():
            _step(rep, requests, engine, shape)
    if given is not None:
        for rep, filled in zip(replicas, replayed_filled, strict=True):
            rep.filled_at = filled

    return outcome_of(fleet, arrival, requests, replicas, shape[1])


def route(  # type: ignore[no-untyped-def]
    r: int,
    req,
    replicas: list,  # type: ignore[type-arg]
    requests: list,  # type: ignore[type-arg]
    fleet: Fleet,
    settings: RouterSettings,
    fixed: list[int] | None,
    block_size: int,
    clock: list[float],
) -> int:
    """The replica of request ``r``, from the replicas' state recounted (``rep.cache``: the
    hashes it holds; ``rep.tree``: its router tree). ``clock[0]``: the trees' last eviction."""
    t = req.arrival
    tree_blocks = max(1, settings.tree_tokens // block_size)
    if fixed is not None:
        i = fixed[r]
    elif fleet.router == "least-loaded":
        i = _argmin([_queued_prefill(rep, requests) for rep in replicas], r)
    elif fleet.router == "kv-aware":
        scores = []
        for rep in replicas:
            load = (_queued_prefill(rep, requests) + _decode_context(rep)) / block_size
            overlap = _leading_run(req.blocks, rep.cache)
            scores.append(settings.load_weight * load - settings.overlap_weight * overlap)
        i = _argmin(scores, r)
    elif fleet.router == "cache-aware":
        interval = settings.evict_interval_s
        if interval >= 0 and t - clock[0] >= interval:
            for rep in replicas:
                _evict(rep.tree, tree_blocks)
            clock[0] = t
        inflight = [len(rep.queue) + len(rep.decoding) for rep in replicas]
        hi, lo = max(inflight), min(inflight)
        if hi - lo > settings.balance_abs and hi > settings.balance_rel * lo:
            i = _argmin(inflight, r)
        else:
            matches = [_leading_run(req.blocks, rep.tree) for rep in replicas]
            best = _argmin([-m for m in matches], r)
            share = settings.cache_threshold * len(req.blocks)
            if req.blocks and matches[best] >= share:
                i = best
            else:
                i = _argmin([len(rep.tree) for rep in replicas], r)
        tree = replicas[i].tree
        _touch(tree, req.blocks, refresh=True)
        if interval < 0:  # no periodic eviction: the bound holds after every insert
            _evict(tree, tree_blocks)
    else:
        raise ValueError(f"no reference for router {fleet.router!r}")
    return i


def _replayed(
    fleet: Fleet, requests: list[_Request], fixed: list[int] | None
) -> tuple[list[int] | None, list[int]]:
    """``belady``: each replica's routed requests replayed by the policy's plain reference,
    their leading runs and each replica's filled-at request; (None, []) for the policies this
    loop keeps itself."""
    if fleet.policy != "belady":
        return None, []
    routing = fixed if fixed is not None else [0] * len(requests)  # one replica
    given, filled = [0] * len(requests), [-1] * fleet.replicas
    for i in range(fleet.replicas):
        mine = [r for r in range(len(requests)) if routing[r] == i]
        ref = reference_replay(
            fleet.policy, [requests[r].blocks for r in mine], fleet.capacity_blocks
        )
        for r, k in zip(mine, ref.hit_blocks, strict=True):
            given[r] = k
        filled[i] = mine[ref.filled_at] if ref.filled_at >= 0 else -1
    return given, filled


def _serve(
    req: _Request,
    rep: _Replica,
    store: OrderedDict[int, None] | None,
    block_size: int,
    cost: StepCost,
    per_token: list[float],
    has_dram: bool,
    run: int | None = None,
) -> None:
    """The request's served run: block by block from the fastest tier that holds it (0 HBM,
    1 this replica's DRAM, 2 the store), cut before a lower tier's block where recomputing
    from there costs less than the copies; its hit tokens by tier, copy time, and the saving
    of each block credited to its tier. ``run``: the leading run a replayed policy gave."""
    sources = [] if run is None else [0] * run
    for b in req.blocks if run is None else ():
        if b in rep.cache:
            sources.append(0)
        elif has_dram and b in rep.dram:
            sources.append(1)
        elif store is not None and b in store:
            sources.append(2)
        else:
            break
    k, inp, nb = len(sources), req.input_tokens, len(req.blocks)

    def hit_of(j: int) -> int:
        served = j - 1 if req.recomputes_last and j >= nb and j > 0 else j
        return min(served * block_size, inp)

    def prefill(j: int) -> float:
        new = max(inp - hit_of(j), 1)
        return _prefill_alone(cost, new, max(inp - new, 0))

    copies = [0.0]  # copies[j]: the copies of the first j blocks, summed in order
    for j in range(k):
        tokens = min(max(inp - j * block_size, 0), block_size)
        copies.append(copies[-1] + per_token[sources[j]] * tokens)
    tiered = has_dram or store is not None
    best = k
    if tiered:
        for j in reversed(range(k)):
            slower = sources[j] != 0 and copies[k] > copies[j]
            if slower and prefill(j) + copies[j] < prefill(best) + copies[best]:
                best = j
    req.sources = sources
    req.hit_blocks = best
    req.hit_tokens = hit_of(best)
    req.no_cache = prefill(0)
    req.transfer = copies[best] if tiered else 0.0
    for j in range(best):
        req.source_tokens[sources[j]] += min(max(req.hit_tokens - j * block_size, 0), block_size)
    if tiered:
        for j in range(best):
            step = prefill(j) - prefill(j + 1) - (copies[j + 1] - copies[j])
            req.source_saved[sources[j]] += step
    else:
        req.source_saved[0] = prefill(0) - prefill(best)


def _prefill_alone(cost: StepCost, new: int, cached: int) -> float:
    """The cost model's ``T(new, cached)``: one prefill alone in a step (the kernel's order of
    operations)."""
    a, b, c, e, f, k1, k2 = (float(x) for x in cost.array())
    return a + b * max(new, k1) + c * cached + e * max(new, k2) * cached + f * new * new


def _step(rep: _Replica, requests: list[_Request], engine: Engine, shape: tuple[int, int]) -> None:
    """One step of ``rep``: decodes, then prefill chunks from the queue; advances its clock.
    ``shape``: the block size and the running-blocks histogram's bucket width."""
    a, b, c, e, f, k1, k2 = (float(x) for x in engine.cost.array())
    d = len(rep.decoding)
    decode_context = _decode_context(rep)
    # the per-step fixed cost, then (c + e·max(1, k2))·ctx + f per decoding request; written
    # in the kernel's order of operations, so the clocks agree to the bit and arrivals that
    # tie with a step's end fall on the same side of it
    seconds = a + f * d + (c + e * max(1.0, k2)) * decode_context
    tokens = d
    left = engine.budget_tokens - d
    running = d + sum(requests[q].started for q in rep.queue)
    through = 0  # queue entries whose prefill ends in this step
    for q in rep.queue:
        if left <= 0:
            break
        req = requests[q]
        if not req.started:
            if running >= engine.max_seqs:
                break
            req.started = True
            req.first_start = rep.now
            running += 1
            seconds += req.transfer  # its prefix is copied in before its first chunk
        take = min(req.to_prefill, left)
        ctx = req.context
        seconds += c * ctx + e * max(take, k2) * ctx + f * take * take
        tokens += take
        left -= take
        req.to_prefill -= take
        req.context += take
        if req.to_prefill > 0:
            break
        through += 1
    seconds += b * max(tokens, k1)
    running = footprint(rep, requests, shape[0])
    rep.running_s += running * seconds
    rep.cached_s += len(rep.cache) * seconds
    bucket = min(running // shape[1], HIST_BUCKETS - 1)
    rep.hist[bucket] = rep.hist.get(bucket, 0.0) + seconds

    rep.now += seconds
    rep.busy += seconds
    rep.steps += 1
    rep.prefill_tokens += tokens - d
    rep.decode_tokens += d
    for r, dec in list(rep.decoding.items()):  # every decoder wrote one token
        dec.context += 1
        dec.left -= 1
        if dec.left == 0:
            del rep.decoding[r]
            requests[r].done_at = rep.now
    for _ in range(through):  # first tokens out
        r = rep.queue.popleft()
        req = requests[r]
        req.ttft = rep.now - req.arrival
        if req.output_tokens - 1 > 0:
            rep.decoding[r] = _Decoding(req.input_tokens + 1, req.output_tokens - 1)
        else:
            req.done_at = rep.now

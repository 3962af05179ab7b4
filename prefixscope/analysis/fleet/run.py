"""One fleet configuration through the compiled loop: the public entry of ``analysis/fleet``.

Under the ``ideal`` engine a replica's cache is an eviction policy the loop keeps per replica
(``caches.loop_policies``: ``lru``, ``fifo``, ``ttl`` on a linked list, ``ttl`` being LRU that
also drops blocks idle longer than ``ttl_s`` on every replica before each arrival; every row
policy, ``lfu`` and ``s3fifo``, on its own rows by its own operations), under any router; the
registry's other bounded policies are replayed per replica under a fixed routing
(``replayed.py``), and ``ceiling`` is refused with its reason (``caches.REFUSED_POLICIES``).
Under ``vllm`` and ``sglang`` the engine's KV pool evicts by its own rule (``engines.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.fleet import _kernel, _pool_state, _records
from prefixscope.analysis.fleet.assign import assign
from prefixscope.analysis.fleet.caches import (
    check_policy,
    check_tiered_policy,
    kept,
    pinned_blocks,
    policy_rows,
    replayed,
)
from prefixscope.analysis.fleet.engines import ENGINES, resolve_engine
from prefixscope.analysis.fleet.pool_inputs import check_fits, repeats
from prefixscope.analysis.fleet.replayed import Pins, replayed_hits
from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.fleet.running import per_busy, preempted, weighted_p95
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.policies.ceiling import leading_runs
from prefixscope.analysis.structure.answers import answer_ids, routed_answer_blocks
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.isolation import subset
from prefixscope.analysis.trace.tail import span

#: Changes each replica's ring holds for a stale router view (``_stale.py``): a block cached
#: or dropped is one; more pending at once than this reach the view early (counted).
LOG_CAPACITY = 2**18
#: The bit masks of the loop hold one bit per replica.
MAX_REPLICAS = 64
#: vLLM's defaults: ``max_num_batched_tokens`` with chunked prefill, and ``max_num_seqs``.
DEFAULT_BUDGET = 8192
DEFAULT_MAX_SEQS = 256
#: A DRAM tier's link: PCIe 5.0 x16, 32 GT/s per lane with 128b/130b encoding, 63 GB/s each
#: way (PCI-SIG), the host link of H100/H200-class GPUs. A shared store's: one 200 Gb/s NIC
#: (25 GB/s) per replica, as RDMA stores (Mooncake Store) are deployed.
DRAM_GBPS = 63.0
STORE_GBPS = 25.0


def dram_gbps_for(gpu: GpuSpec | None) -> float:
    """The default DRAM link of a GPU's host: its ``host_link_gbps`` (the catalog's, or a GPU
    file's: PCIe 4.0 for A100 and L40S, 5.0 for H100-class parts), :data:`DRAM_GBPS` where
    the GPU does not say (a ``NAME:TFLOPS:TBPS`` spec, or the CPU), as ``plan`` prices it."""
    return (gpu.host_link_gbps if gpu is not None else None) or DRAM_GBPS


#: A shared store of unbounded capacity (``--shared-store inf``), in blocks.
UNBOUNDED = 2**62


@dataclass(frozen=True)
class Tiers:
    """Where KV lives besides each replica's HBM: a DRAM tier per replica (``dram_blocks``,
    0: none), read at ``dram_gbps``; one store for the fleet (``store_blocks``, None: none,
    :data:`UNBOUNDED`: no limit), read at ``store_gbps`` (GB/s; ``inf``: free). The GiB they
    came from, when given so, for the tables."""

    dram_blocks: int = 0
    dram_gbps: float = DRAM_GBPS
    store_blocks: int | None = None
    store_gbps: float = STORE_GBPS
    dram_gib: float | None = None
    store_gib: float | None = None

    def check(self) -> None:
        if self.dram_blocks < 0:
            raise ValueError(f"a DRAM tier cannot hold {self.dram_blocks} blocks")
        if self.store_blocks is not None and self.store_blocks < 0:
            raise ValueError(f"a shared store cannot hold {self.store_blocks} blocks")
        if not (self.dram_gbps > 0 and self.store_gbps > 0):
            raise ValueError("a tier's bandwidth must be positive (GB/s, or inf)")

    def per_token_s(self, kv_bytes_per_token: float) -> tuple[float, float]:
        """Seconds to copy one token's KV from DRAM and from the store."""
        return kv_bytes_per_token / (self.dram_gbps * 1e9), kv_bytes_per_token / (
            self.store_gbps * 1e9
        )


@dataclass(frozen=True)
class Fleet:
    """One configuration: the router, the replica count, each replica's cache (capacity in
    blocks, with the GiB it came from, if any) and the traffic's speed-up."""

    router: str
    replicas: int
    capacity_blocks: int
    policy: str = "lru"
    load_scale: float = 1.0
    capacity_gib: float | None = None
    tiers: Tiers = field(default_factory=Tiers)
    engine: str = "ideal"
    ttl_s: float | None = None  # ``ttl``: idle seconds before a block is dropped
    pins: Pins = field(default_factory=Pins)  # ``pinned``: which prefixes each replica pins
    #: seconds the router's view of the caches lags them (``_stale.py``; kv-aware reads them)
    router_delay_s: float = 0.0
    prefix_caching: bool = True  # False: vLLM's --no-enable-prefix-caching (``_pool.py``)

    @property
    def policy_label(self) -> str:
        """The policy as the tables name it, its setting included (``ttl=60s``)."""
        if self.policy == "pinned":
            return self.pins.label()
        return f"ttl={self.ttl_s:.12g}s" if self.policy == "ttl" else self.policy

    @property
    def replayed(self) -> bool:
        """Whether each replica replays its routed stream by the policy's own kernel."""
        return replayed(self.policy, self.pins)

    def check(self) -> None:
        router = resolve_router(self.router)
        pooled = resolve_engine(self.engine).pooled
        self.tiers.check()
        check_policy(self.policy, self.pins, self.router, router.fixed or self.replicas == 1)
        self.pins.check(self.policy)
        if self.policy == "ttl" and not (self.ttl_s is not None and self.ttl_s >= 0):
            raise ValueError("ttl needs --ttl SECONDS")
        if self.policy != "ttl" and self.ttl_s is not None:
            raise ValueError(f"--ttl applies to --policy ttl, not {self.policy}")
        if pooled and self.policy != "lru":
            raise ValueError(
                f"the {self.engine} engine evicts by its own rule; --policy applies to "
                "--engine ideal"
            )
        tiered = self.tiers.dram_blocks > 0 or self.tiers.store_blocks is not None
        check_tiered_policy(self.policy, tiered, self.prefix_caching)
        why = resolve_engine(self.engine).store_from_dram
        if why and self.tiers.store_blocks is not None and self.tiers.dram_blocks == 0:
            raise ValueError(
                f"a shared store under --engine {self.engine} needs a DRAM tier (--tier "
                f"dram:GIB, not none): {why}"
            )
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be 1 to {MAX_REPLICAS}, got {self.replicas}")
        if self.capacity_blocks < 1:
            raise ValueError(f"capacity must be at least one block, got {self.capacity_blocks}")
        if not self.load_scale > 0:
            raise ValueError(f"the load scale must be positive, got {self.load_scale}")
        if not 0 <= self.router_delay_s < float("inf"):
            raise ValueError(f"a router's delay is seconds ≥ 0, got {self.router_delay_s}")
        if self.router_delay_s and router.kind != _records.KV_AWARE:
            raise ValueError(
                f"--router-delay lags a router fed by the caches' events (kv-aware); "
                f"{self.router} reads none (cache-aware keeps its own tree)"
            )


@dataclass(frozen=True)
class Engine:
    """How every replica runs: the step cost, the token budget of a step and the most requests
    running at once (vLLM's defaults), and the KV bytes of one token (what a tier copies)."""

    cost: StepCost
    budget_tokens: int = DEFAULT_BUDGET
    max_seqs: int = DEFAULT_MAX_SEQS
    routers: RouterSettings = field(default_factory=RouterSettings)
    kv_bytes_per_token: float = 0.0
    #: A KV pool caches a finished request's answer under its next turn's ids
    #: (``structure/answers.py``), as vLLM and SGLang cache generated blocks; False: never hit.
    cache_answers: bool = True

    def check(self) -> None:
        if self.max_seqs < 1 or self.budget_tokens < self.max_seqs:
            raise ValueError(
                f"a step budget of {self.budget_tokens} tokens must cover max_seqs "
                f"({self.max_seqs}) decodes"
            )
        self.routers.check()


@dataclass(frozen=True, eq=False)
class Traffic:
    """What the fleet needs beyond the trace, per request in replay order: output tokens (0
    when the log has none) and session ids (None: the request has none)."""

    output_tokens: np.ndarray
    sessions: Sequence[str | None] | None = None

    def take(self, requests: np.ndarray) -> Traffic:
        sessions = None if self.sessions is None else [self.sessions[i] for i in requests]
        return Traffic(self.output_tokens[requests], sessions)


@dataclass(frozen=True)
class Stop:
    """Stop the loop once the fleet misses a TTFT target for sure: ``targets`` are (limit in
    seconds, count) pairs, the count of requests from ``first`` on whose TTFT exceeds the limit
    that decides the miss (``plan/slo.py`` derives it from a percentile). The requests before
    ``first`` (a warm-up) are simulated but not counted."""

    first: int = 0
    targets: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True, eq=False)
class FleetOutcome:
    """Per request: the replica, leading cached blocks and tokens served from cache, TTFT (s),
    the start of its first prefill step and when it finished (s since the first arrival, on
    the scaled clock). Per replica: busy seconds, steps, prefill and decode tokens computed,
    the request after which its cache was full (-1: never) and when it went idle for good.
    Per request and source (HBM, DRAM, store): hit tokens, and the prefill seconds each saved,
    transfers paid (a telescoping split of ``T(input, 0) − T(served) − transfers``); the
    transfer seconds; the prefill alone without any cache, ``T(input, 0)``. Per replica,
    time-weighted over its steps (each step weighs its seconds; idle time does not count):
    the mean and p95 of the blocks its running requests hold (under ``ideal``: would hold) and
    the mean prefix cache (blocks cached but not held by a running request; ``ideal``: its
    whole cache); and how many times a request was preempted."""

    fleet: Fleet
    arrival: np.ndarray
    replica: np.ndarray
    hit_blocks: np.ndarray
    hit_tokens: np.ndarray
    ttft: np.ndarray
    first_start: np.ndarray
    done_at: np.ndarray
    busy: np.ndarray
    steps: np.ndarray
    prefill_tokens: np.ndarray
    decode_tokens: np.ndarray
    filled_at: np.ndarray
    drained_at: np.ndarray
    source_tokens: np.ndarray
    source_saved_s: np.ndarray
    transfer_s: np.ndarray
    no_cache_s: np.ndarray
    preemptions: np.ndarray
    running_blocks_mean: np.ndarray
    running_blocks_p95: np.ndarray
    prefix_cache_blocks_mean: np.ndarray
    #: Per request, its lookups after a preemption (pools): how many, the tokens they looked
    #: up and the tokens they found, as vLLM's ``preempted_*`` counters count them apart from
    #: the hit rate (``v1/metrics/stats.py``).
    preempted: np.ndarray
    #: The request at whose arrival the loop stopped (:class:`Stop`): it and every later one
    #: were never simulated, nor the steps after that arrival. -1: the whole trace ran.
    stopped_at: int = -1
    #: Per request, its prompt tokens not served by where they went (n × ``budget.PARTS``,
    #: ``_budget.py``); None: not kept (the run was not asked for it).
    miss: np.ndarray | None = None
    #: The watched request's blocks by part (``_records.HIT``, ``_budget.py``'s codes);
    #: None: none was watched.
    why: np.ndarray | None = None
    #: Cache changes a stale router view took before they were ``router_delay_s`` old (a
    #: replica's ring of :data:`LOG_CAPACITY` full; ``_stale.py``); 0 for a fresh view.
    view_early: int = 0

    @property
    def fleet_filled_at(self) -> int:
        """The request after which every replica that served one had a full cache (-1:
        some never filled)."""
        served = np.bincount(self.replica, minlength=self.fleet.replicas) > 0
        ends = self.filled_at[served]
        return int(ends.max()) if len(ends) and (ends >= 0).all() else -1


def simulate_fleet(
    trace: Trace,
    traffic: Traffic,
    fleet: Fleet,
    engine: Engine,
    routing: np.ndarray | None = None,
    stop: Stop | None = None,
    budget: bool = False,
    watch: int | None = None,
) -> FleetOutcome:
    """The fleet over the whole trace. ``routing``: a fixed router's assignment when already
    computed (``assign.assign``); ``stop``: end early once a TTFT target is missed for sure;
    ``budget``: keep each request's miss budget (``budget.py``); ``watch``: and the parts of
    that request's blocks."""
    fleet.check()
    engine.check()
    router = resolve_router(fleet.router)
    kind = router.kind
    if fleet.replayed and not router.fixed:  # one replica (``check``): every request to it
        routing, kind = np.zeros(trace.n_requests, np.int32), _records.FIXED
    if router.fixed and routing is None:
        routing = assign(trace, fleet.router, fleet.replicas, engine.routers, traffic.sessions)
    fixed = np.zeros(0, np.int32) if routing is None else np.asarray(routing, np.int32)
    return _run(
        trace, traffic, fleet, engine, kind, fixed, fleet.replicas, stop=stop,
        budget=budget or watch is not None, watch=watch,
    )  # fmt: skip


def simulate_replica(
    trace: Trace, traffic: Traffic, fleet: Fleet, engine: Engine, requests: np.ndarray
) -> FleetOutcome:
    """One replica of a fixed router alone, on the requests routed to it (their positions):
    the same replica as in :func:`simulate_fleet`, since nothing else reaches it."""
    sub = subset(trace, requests)
    if fleet.tiers.store_blocks is not None:
        raise ValueError("a shared store joins the replicas: simulate the fleet together")
    one = replace(fleet, replicas=1, capacity_gib=None)
    zeros = np.zeros(len(requests), np.int32)
    # the histogram's buckets of the whole trace, so its p95 is the fleet's to the block
    width = histogram_width(trace, np.asarray(traffic.output_tokens, np.int64), fleet, engine)
    return _run(sub, traffic.take(requests), one, engine, _records.FIXED, zeros, 1, width)


def _run(  # type: ignore[no-untyped-def]
    trace: Trace,
    traffic: Traffic,
    fleet: Fleet,
    engine: Engine,
    kind: int,
    fixed,
    n_rep: int,
    width: int | None = None,
    stop: Stop | None = None,
    budget: bool = False,
    watch: int | None = None,
) -> FleetOutcome:
    output = np.asarray(traffic.output_tokens, np.int64)
    code = ENGINES[fleet.engine].code
    caching = fleet.prefix_caching  # off: every lookup a block of its own, nothing hits
    if not caching and trace.n_unique < trace.n_lookups:
        trace = span(trace, 0, trace.n_requests, fresh=True)
    if code != _records.IDEAL:  # the engines cache full blocks only (``trace/full_blocks.py``)
        trace = full_blocks_only(trace)
        check_fits(trace, output, fleet.capacity_blocks, fleet.engine)
    r, t, n = engine.routers, fleet.tiers, trace.n_requests
    arrival = trace.times / fleet.load_scale
    dram_s, store_s = t.per_token_s(engine.kv_bytes_per_token)
    width = width or histogram_width(trace, output, fleet, engine)
    repeat = repeats(trace) if code != _records.IDEAL else np.zeros(1, np.bool_)
    inputs = trace.input_tokens.view()  # read-only as loaded or not: one compiled signature
    inputs.flags.writeable = False
    if code != _records.IDEAL and engine.cache_answers and caching:
        routed = fixed if len(fixed) == n else None
        answers = answer_ids(trace, routed_answer_blocks(trace, output, routed))
    else:
        answers = (np.zeros(n + 1, np.int64), np.zeros(0, np.int32))
    given, filled = np.zeros(0, np.int32), None
    if fleet.replayed:
        given, filled = replayed_hits(
            trace, fleet.policy, fleet.capacity_blocks, fixed, n_rep, fleet.pins
        )
    loop = kept(fleet.policy, fleet.pins)
    pinned = np.zeros(0, bool)
    if loop.code == _records.PINNED:
        pinned = pinned_blocks(trace, fleet.pins, fleet.capacity_blocks)
    workload = _records.Workload(
        offsets=trace.offsets, blocks=trace.blocks, parent=trace.parent, arrival=arrival,
        input_tokens=inputs, output_tokens=output, recompute_last=trace.recomputes_last_block,
        repeat=repeat, answer_offsets=answers[0], answer_blocks=answers[1], given_hits=given,
        ceiling_run=leading_runs(trace) if budget else np.zeros(0, np.int32), pinned=pinned,
    )  # fmt: skip
    c = engine.cost
    cost = _records.Cost(a=c.a, b=c.b, c=c.c, e=c.e, f=c.f, k1=c.k1, k2=c.k2)
    sched = _records.Sched(
        budget=engine.budget_tokens, max_seqs=engine.max_seqs, block_size=trace.block_size,
        engine=code, capacity=fleet.capacity_blocks, recency=loop.recency, hist_width=width,
        ttl=-1.0 if fleet.ttl_s is None else float(fleet.ttl_s), policy=loop.code,
        caching=caching,
    )  # fmt: skip
    rp = _records.RouterParams(
        kind=kind, threshold=float(r.cache_threshold), balance_abs=float(r.balance_abs),
        balance_rel=float(r.balance_rel), tree_blocks=max(1, r.tree_tokens // trace.block_size),
        evict_interval_s=float(r.evict_interval_s), overlap_weight=float(r.overlap_weight),
        load_weight=float(r.load_weight), delay_s=float(fleet.router_delay_s),
    )  # fmt: skip
    store = -1 if t.store_blocks is None else t.store_blocks
    tiers = _records.TierParams(
        dram_blocks=t.dram_blocks, store_blocks=store, dram_s=dram_s, store_s=store_s
    )
    watched = _records.NONE if watch is None else watch
    stale = fleet.router_delay_s > 0
    req = _records.requests(
        n, budget, watched, int(trace.blocks_per_request[watch] if watch is not None else 0),
        stale,
    )  # fmt: skip
    rep = _records.replicas(n_rep, float(arrival[0]) if n else 0.0)
    tree = kind == _records.CACHE_AWARE
    copies = _pool_state.dup_slots(code, fleet.capacity_blocks, len(answers[1]))
    longest = int(trace.blocks_per_request.max()) if n else 0
    sets = _records.sets(
        trace.n_unique, n_rep, tree, t.dram_blocks > 0, store >= 0, copies,
        fleet.ttl_s is not None, budget and code != _records.IDEAL,
        min(LOG_CAPACITY, 2 * (len(trace.blocks) + len(answers[1])) + 1) if stale else 0,
        policy_rows(trace, loop, n_rep, longest), linked=caching or code == _records.IDEAL,
    )  # fmt: skip
    hp = _records.heaps(n, n_rep, engine.max_seqs)
    pool = _pool_state.pool(
        n, trace.n_unique, n_rep, code, fleet.capacity_blocks, len(answers[1]), caching
    )
    scratch = (
        np.zeros(longest + 1, np.int8),
        np.zeros(longest + 2, np.float64),
        np.zeros(longest + 2, np.float64),
        np.array([0.0, dram_s, store_s]),
    )
    rule = stop or Stop()
    halt = _records.stop(
        [limit for limit, _ in rule.targets], [count for _, count in rule.targets], rule.first
    )
    _kernel.fleet(workload, fixed, cost, sched, rp, tiers, req, rep, hp, sets, pool, scratch, halt)
    if filled is not None:  # the replayed caches' own: the loop kept none
        rep.filled_at[:] = filled
    return FleetOutcome(
        fleet=fleet, arrival=arrival, replica=req.replica, hit_blocks=req.hit_blocks,
        hit_tokens=req.hit_tok, ttft=req.ttft, first_start=req.first_start, done_at=req.done_at,
        busy=rep.busy, steps=rep.steps, prefill_tokens=rep.prefill_tok,
        decode_tokens=rep.decode_tok, filled_at=rep.filled_at, drained_at=rep.now,
        source_tokens=req.src_tok, source_saved_s=req.saved, transfer_s=req.xfer,
        no_cache_s=req.cost_none, preemptions=rep.preemptions,
        running_blocks_mean=per_busy(rep.running_s, rep.busy),
        running_blocks_p95=weighted_p95(rep.hist, width),
        prefix_cache_blocks_mean=per_busy(rep.cached_s, rep.busy),
        preempted=preempted(req, code), stopped_at=int(halt.at[0]),
        miss=req.miss if budget else None, why=None if watch is None else req.why[1:],
        view_early=int(sets.log_at[:, 2].sum()),
    )  # fmt: skip


def histogram_width(trace: Trace, output: np.ndarray, fleet: Fleet, engine: Engine) -> int:
    """Blocks per bucket of the running-blocks histogram: its buckets cover the most blocks
    running requests can hold (a pool's capacity; ``ideal``: ``max_seqs`` of the longest)."""
    bound = fleet.capacity_blocks
    if trace.n_requests and not resolve_engine(fleet.engine).pooled:
        longest = trace.input_tokens + np.maximum(output, 1) - 1
        need = np.maximum(trace.blocks_per_request, -(-longest // trace.block_size))
        bound = max(bound, engine.max_seqs * int(need.max()))
    return -(-(bound + 1) // _records.HIST_BUCKETS)

"""One fleet configuration through the compiled loop: the public entry of ``analysis/fleet``.

A replica's cache is an eviction policy with a per-replica linked list; the policies a fleet
runs are the online ones that keep one (``lru``, ``fifo``). Belady needs each replica's future,
which a stateful router decides as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prefixscope.analysis.fleet import _kernel
from prefixscope.analysis.fleet.assign import assign
from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import subset

FLEET_POLICIES = {"lru": _kernel.LRU, "fifo": _kernel.FIFO}
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
#: A100 hosts: PCIe 4.0 x16, 16 GT/s per lane, 31.5 GB/s each way.
DRAM_GBPS_PCIE4 = 31.5


def dram_gbps_for(gpu: str) -> float:
    """The default DRAM link of a GPU's host: PCIe 4.0 for A100s, 5.0 for the others."""
    return DRAM_GBPS_PCIE4 if "a100" in gpu.lower() else DRAM_GBPS


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

    def check(self) -> None:
        resolve_router(self.router)
        self.tiers.check()
        if self.policy not in FLEET_POLICIES:
            raise ValueError(
                f"a fleet's caches run {', '.join(FLEET_POLICIES)}; got {self.policy!r}"
            )
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"replicas must be 1 to {MAX_REPLICAS}, got {self.replicas}")
        if self.capacity_blocks < 1:
            raise ValueError(f"capacity must be at least one block, got {self.capacity_blocks}")
        if not self.load_scale > 0:
            raise ValueError(f"the load scale must be positive, got {self.load_scale}")


@dataclass(frozen=True)
class Engine:
    """How every replica runs: the step cost, the token budget of a step and the most requests
    running at once (vLLM's defaults), and the KV bytes of one token (what a tier copies)."""

    cost: StepCost
    budget_tokens: int = DEFAULT_BUDGET
    max_seqs: int = DEFAULT_MAX_SEQS
    routers: RouterSettings = field(default_factory=RouterSettings)
    kv_bytes_per_token: float = 0.0

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


@dataclass(frozen=True, eq=False)
class FleetOutcome:
    """Per request: the replica, leading cached blocks and tokens served from cache, TTFT (s),
    the start of its first prefill step and when it finished (s since the first arrival, on
    the scaled clock). Per replica: busy seconds, steps, prefill and decode tokens computed,
    the request after which its cache was full (-1: never) and when it went idle for good.
    Per request and source (HBM, DRAM, store): hit tokens, and the prefill seconds each saved,
    transfers paid (a telescoping split of ``T(input, 0) − T(served) − transfers``); the
    transfer seconds; the prefill alone without any cache, ``T(input, 0)``."""

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
) -> FleetOutcome:
    """The fleet over the whole trace. ``routing``: a fixed router's assignment when already
    computed (``assign.assign``)."""
    fleet.check()
    engine.check()
    router = resolve_router(fleet.router)
    if router.fixed and routing is None:
        routing = assign(trace, fleet.router, fleet.replicas, engine.routers, traffic.sessions)
    fixed = np.zeros(0, np.int32) if routing is None else np.asarray(routing, np.int32)
    return _run(trace, traffic, fleet, engine, router.kind, fixed, fleet.replicas)


def simulate_replica(
    trace: Trace, traffic: Traffic, fleet: Fleet, engine: Engine, requests: np.ndarray
) -> FleetOutcome:
    """One replica of a fixed router alone, on the requests routed to it (their positions):
    the same replica as in :func:`simulate_fleet`, since nothing else reaches it."""
    sub = subset(trace, requests)
    if fleet.tiers.store_blocks is not None:
        raise ValueError("a shared store joins the replicas: simulate the fleet together")
    one = Fleet(
        fleet.router, 1, fleet.capacity_blocks, fleet.policy, fleet.load_scale, None, fleet.tiers
    )
    zeros = np.zeros(len(requests), np.int32)
    return _run(sub, traffic.take(requests), one, engine, _kernel.FIXED, zeros, 1)


def _run(  # type: ignore[no-untyped-def]
    trace: Trace, traffic: Traffic, fleet: Fleet, engine: Engine, kind: int, fixed, n_rep: int
) -> FleetOutcome:
    r = engine.routers
    rparams = np.array(
        [
            r.cache_threshold,
            r.balance_abs,
            r.balance_rel,
            max(1, r.tree_tokens // trace.block_size),
            r.evict_interval_s,
            r.overlap_weight,
            r.load_weight,
        ],
        np.float64,
    )
    nodes = n_rep * (trace.n_unique + 1)
    tree = kind == _kernel.CACHE_AWARE
    arrival = trace.times / fleet.load_scale
    t = fleet.tiers
    dram = t.dram_blocks > 0
    store = t.store_blocks is not None
    dram_s, store_s = t.per_token_s(engine.kv_bytes_per_token)
    tiers = np.array(
        [t.dram_blocks, -1 if t.store_blocks is None else t.store_blocks, dram_s, store_s],
        np.float64,
    )
    out = _kernel.fleet(
        trace.offsets,
        trace.blocks,
        arrival,
        trace.input_tokens,
        np.asarray(traffic.output_tokens, np.int64),
        trace.recomputes_last_block,
        trace.block_size,
        kind,
        fixed,
        n_rep,
        fleet.capacity_blocks,
        FLEET_POLICIES[fleet.policy],
        engine.cost.array(),
        engine.budget_tokens,
        engine.max_seqs,
        rparams,
        np.zeros(trace.n_unique, np.uint64),
        np.empty(nodes, np.int32),
        np.empty(nodes, np.int32),
        np.zeros(trace.n_unique if tree else 1, np.uint64),
        np.empty(nodes if tree else 1, np.int32),
        np.empty(nodes if tree else 1, np.int32),
        tiers,
        np.zeros(trace.n_unique if dram else 1, np.uint64),
        np.empty(nodes if dram else 1, np.int32),
        np.empty(nodes if dram else 1, np.int32),
        np.zeros(trace.n_unique if store else 1, np.bool_),
        np.empty(trace.n_unique + 1 if store else 1, np.int32),
        np.empty(trace.n_unique + 1 if store else 1, np.int32),
    )
    return FleetOutcome(fleet, arrival, *out)


def merge_replicas(
    trace: Trace, fleet: Fleet, parts: Sequence[tuple[np.ndarray, FleetOutcome]]
) -> FleetOutcome:
    """One outcome from per-replica runs (``(requests, outcome)`` in replica order)."""
    n = trace.n_requests
    per_request = {
        k: np.zeros((n, *v.shape[1:]), v.dtype) for k, v in _request_arrays(parts[0][1]).items()
    }
    for i, (requests, part) in enumerate(parts):
        for k, v in _request_arrays(part).items():
            per_request[k][requests] = v
        per_request["replica"][requests] = i

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for _, p in parts])

    filled = np.array(
        [req[p.filled_at[0]] if p.filled_at[0] >= 0 else -1 for req, p in parts], np.int64
    )
    return FleetOutcome(
        fleet,
        trace.times / fleet.load_scale,
        per_request["replica"],
        per_request["hit_blocks"],
        per_request["hit_tokens"],
        per_request["ttft"],
        per_request["first_start"],
        per_request["done_at"],
        cat("busy"),
        cat("steps"),
        cat("prefill_tokens"),
        cat("decode_tokens"),
        filled,
        cat("drained_at"),
        per_request["source_tokens"],
        per_request["source_saved_s"],
        per_request["transfer_s"],
        per_request["no_cache_s"],
    )


def _request_arrays(o: FleetOutcome) -> dict[str, np.ndarray]:
    names = (
        "replica",
        "hit_blocks",
        "hit_tokens",
        "ttft",
        "first_start",
        "done_at",
        "source_tokens",
        "source_saved_s",
        "transfer_s",
        "no_cache_s",
    )
    return {k: getattr(o, k) for k in names}

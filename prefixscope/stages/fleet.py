"""Stage ``fleet``: the warehouse's trace through every router × replica count × capacity ×
load scale → ``fleet_hit_rates`` and ``fleet_replicas``."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import Fitted, check_kind, device, wants_calibration
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.prices import Prices, load_prices
from prefixscope.analysis.cost.savings import DEFAULT_GPU, DEFAULT_MODEL, gpu_key
from prefixscope.analysis.fanout import fan_out, width
from prefixscope.analysis.fleet.assign import assign
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.hardware import (
    Hardware,
    capacity_options,
    check_pools_fit,
    of_deployment,
)
from prefixscope.analysis.fleet.merge import merge_replicas
from prefixscope.analysis.fleet.replayed import Pins
from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.fleet.run import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_SEQS,
    Engine,
    Fleet,
    FleetOutcome,
    Tiers,
    Traffic,
    check_tiered_policy,
    simulate_fleet,
    simulate_replica,
)
from prefixscope.analysis.fleet.stepcost import StepCost, choose
from prefixscope.analysis.fleet.tables import (
    FLEET_HIT_RATES_SCHEMA,
    FLEET_REPLICAS_SCHEMA,
    Pricing,
    hit_rate_rows,
    replica_rows,
    shared_start,
    window_groups,
)
from prefixscope.analysis.fleet.tierspec import TierSpec, tiers_of
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.load import block_size_of, load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.trace.tail import tail, tail_start
from prefixscope.analysis.trace.windows import check_windows
from prefixscope.stages.outcomes import calibrated


@dataclass(frozen=True)
class FleetSettings:
    """Every combination of ``routers`` × ``replicas`` × capacities (per replica) × DRAM tier
    options (per replica; None: none) × shared store options (None: none) × ``load_scales``
    runs under ``policy``. ``model`` and ``gpu`` price the steps (``cost_model``, by
    ``cost/choice.py``'s rule: a calibrated model where the warehouse holds one and it is
    allowed, else the measured model where it covers, else the roofline); ``model`` also
    turns GiB into blocks and sizes what a tier copies. Fixed routers without a shared store
    run each replica as its own task where ``workers`` / ``dask_address`` say."""

    routers: tuple[str, ...] = ("round-robin",)
    replicas: tuple[int, ...] = (4,)
    capacities: Capacities = field(default_factory=lambda: Capacities(blocks=[16_000]))
    policy: str = "lru"
    #: ``ttl``'s idle seconds before a block is dropped.
    ttl_s: float | None = None
    #: ``pinned``'s prefixes per replica (``replayed.Pins``).
    pins: Pins = field(default_factory=Pins)
    load_scales: tuple[float, ...] = (1.0,)
    #: Each configuration under every one of these engines (``engines.ENGINES``).
    engines: tuple[str, ...] = ("ideal",)
    drams: tuple[TierSpec | None, ...] = (None,)
    stores: tuple[TierSpec | None, ...] = (None,)
    windows: tuple[str, ...] = ("all",)
    model: str = DEFAULT_MODEL
    kv_dtype: str = "bf16"
    gpu: str = DEFAULT_GPU
    cost_model: str = "auto"
    #: Each replica one of these (``GPU[xTP]``): its KV pool is the capacity, unless
    #: ``capacities`` gives one (a what-if); its GPU prices the steps in ``gpu``'s place.
    deployments: tuple[str, ...] = ()
    #: A config.json whose shape ``model`` stands for (``resolve_model``).
    model_config: str | None = None
    budget_tokens: int = DEFAULT_BUDGET
    max_seqs: int = DEFAULT_MAX_SEQS
    router_settings: RouterSettings = field(default_factory=RouterSettings)
    workers: int | None = 1
    dask_address: str | None = None
    #: Simulate the last requests holding at most this many lookups (``trace/tail.py``) when
    #: the trace holds more; None: the whole trace.
    max_lookups: int | None = None
    #: Blocks as vLLM counts them under every engine (``trace/full_blocks.py``): a hash-id
    #: trace's partial last block never cached, a prompt's last token always computed.
    vllm_blocks: bool = False
    #: A KV pool caches a finished request's answer where its next turn sends it back
    #: (``structure/answers.py``); False: generated blocks never hit.
    cache_answers: bool = True
    #: A TOML file of prices (``cost/prices.py``; None: the defaults): what the GPU-seconds
    #: saved are worth and what the tiers cost.
    prices: str | None = None

    def check(self) -> None:
        """Names and numbers first, before any work."""
        if self.max_lookups is not None and self.max_lookups < 1:
            raise ValueError(f"max_lookups must be at least 1, not {self.max_lookups}")
        for name in self.routers:
            resolve_router(name)
        if not self.engines:
            raise ValueError("give at least one engine")
        for name in self.engines:
            resolve_engine(name)
        if not (self.routers and self.replicas and self.load_scales and self.drams and self.stores):
            raise ValueError("give at least one router, replica count, load scale and tier option")
        shape = self.shape
        gpu_key(self.gpu)
        # each deployment at the smallest block (one that cannot fit, fits nowhere) and the
        # cost model it asks for
        for gpu, tp in _gpu_texts(self):
            check_kind(self.cost_model, shape, device(gpu), tp)
        check_windows(self.windows)
        for dram in self.drams:
            if dram is not None:
                dram.check("DRAM tier")
        for store in self.stores:
            if store is not None:
                store.check("shared store")
        # the grid below is checked untiered: the tiers asked for, against the policy, here
        tiered = any(d is not None for d in self.drams) or any(t is not None for t in self.stores)
        check_tiered_policy(self.policy, tiered)
        self.pins.check(self.policy, read=True)
        for fleet in self.grid([1]):
            fleet.check()
        load_prices(self.prices)
        Engine(
            StepCost(0, 0, 0, 0, 0, 1, 1, "check"),
            self.budget_tokens,
            self.max_seqs,
            self.router_settings,
        ).check()

    @property
    def shape(self) -> ModelShape:
        return resolve_model(self.model, self.model_config)

    def tiers(self, block_size: int, gpu: str | None = None) -> list[Tiers]:
        """Every DRAM × store option, in blocks of ``block_size``, a DRAM tier on the host link
        of ``gpu`` (default: ``gpu``'s) unless it names its own."""
        return [
            tiers_of(d, st, self.shape, block_size, self.kv_dtype, gpu or self.gpu)
            for d in self.drams
            for st in self.stores
        ]

    def grid(
        self,
        blocks: Sequence[int],
        gibs: Sequence[float | None] | None = None,
        tiers: Sequence[Tiers] | None = None,
    ) -> list[Fleet]:
        """Every replicas × capacity × tiers × load scale × router."""
        gibs = list(gibs) if gibs else [None] * len(blocks)
        return [
            Fleet(router, n, int(c), self.policy, float(s), g, t, e, self.ttl_s, self.pins)
            for e, n, (c, g), t, s, router in itertools.product(
                self.engines,
                self.replicas,
                zip(blocks, gibs, strict=True),
                list(tiers or [Tiers()]),
                self.load_scales,
                self.routers,
            )
        ]


@dataclass(frozen=True)
class FleetResult:
    run_id: str
    hit_rates: pa.Table
    replicas: pa.Table
    outcomes: tuple[FleetOutcome, ...]


def simulate_fleets(wh: str | Path, settings: FleetSettings) -> FleetResult:
    settings.check()
    _precheck_pools(wh, settings)
    gpus = list(dict.fromkeys(_gpu_texts(settings)))
    with warehouse.StageRun(wh, "fleet", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            traffic = load_traffic(con)
            # a calibrated model is one GPU's (a replay times one device): it prices TP 1 only
            fitted = {
                (g, tp): calibrated(con, settings.shape, g)
                if wants_calibration(settings.cost_model, tp)
                else None
                for g, tp in gpus
            }
        first = tail_start(trace, settings.max_lookups)
        if first:
            trace = tail(trace, first)
            traffic = traffic.take(np.arange(first, first + trace.n_requests))
        if settings.vllm_blocks:  # every engine; ``vllm`` always counts so
            trace = full_blocks_only(trace)
        prices = load_prices(settings.prices)
        priced = {
            (g, tp): engine_for(replace(settings, gpu=g), fitted[(g, tp)], tp, prices)
            for g, tp in gpus
        }
        options = _options(settings, trace.block_size)
        # a deployment's DRAM tier runs on its own GPU's host link
        runs = [
            (f, h)
            for b, g, h in options
            for f in settings.grid(
                [b], [g], settings.tiers(trace.block_size, h.priced_by(settings.gpu)[0])
            )
        ]
        outcomes = simulate_by_gpu(trace, traffic, runs, priced, settings)
        pricing = [priced[h.priced_by(settings.gpu)][1] for _, h in runs]
        hardware = [h for _, h in runs]
        hit_rates, replicas = tables(trace, outcomes, settings.windows, pricing, hardware)
        with stage_run.publishing() as con:
            warehouse.append(con, "fleet_hit_rates", hit_rates, stage_run.run_id)
            warehouse.append(con, "fleet_replicas", replicas, stage_run.run_id)
    return FleetResult(stage_run.run_id, hit_rates, replicas, tuple(outcomes))


def _options(settings: FleetSettings, block_size: int) -> list[tuple[int, float | None, Hardware]]:
    """Each capacity with its hardware: given (blocks, tokens or GiB), else each deployment's
    KV pool."""
    given = settings.capacities
    capacities = replace(
        given,
        model=given.model or (settings.model if given.gib else None),
        model_config=given.model_config or settings.model_config,
        kv_dtype=settings.kv_dtype,
    )
    some = bool(given.blocks or given.tokens or given.gib)
    blocks, gibs = capacities.resolve(block_size) if some else ([], [])
    return capacity_options(
        blocks, gibs, settings.deployments, settings.shape, settings.gpu, block_size,
        settings.kv_dtype,
    )  # fmt: skip


def _precheck_pools(wh: str | Path, settings: FleetSettings) -> None:
    """A pool engine's what-if capacity beyond its deployment is refused before the run
    starts, so nothing is written: it needs only the trace's block size."""
    given = settings.capacities
    pooled = any(resolve_engine(e).pooled for e in settings.engines)
    if not (pooled and settings.deployments and (given.blocks or given.tokens or given.gib)):
        return
    with warehouse.reading(wh) as con:
        block_size = block_size_of(con)
    options = _options(settings, block_size)
    check_pools_fit([(f, h) for b, g, h in options for f in settings.grid([b], [g])])


def _gpu_texts(settings: FleetSettings) -> list[tuple[str, int]]:
    """The GPUs that price the steps and the TP they run at: each deployment's, else one
    ``gpu``."""
    hardware = [
        of_deployment(d, settings.shape, 1, settings.kv_dtype) for d in settings.deployments
    ]
    return [h.priced_by(settings.gpu) for h in hardware] or [(settings.gpu, 1)]


def simulate_by_gpu(
    trace: Trace,
    traffic: Traffic,
    runs: Sequence[tuple[Fleet, Hardware]],
    priced: dict[tuple[str, int], tuple[Engine, Pricing]],
    settings: FleetSettings,
) -> list[FleetOutcome]:
    """Each configuration's outcome, in ``runs`` order: those of one (GPU, TP) under its
    engine, a configuration that two rows share (deployments of one GPU and TP at one what-if
    capacity) simulated once."""
    done: dict[tuple[tuple[str, int], Fleet], FleetOutcome] = {}
    for key, (engine, _) in priced.items():
        mine = list(dict.fromkeys(f for f, h in runs if h.priced_by(settings.gpu) == key))
        done |= {
            (key, f): o
            for f, o in zip(
                mine, simulate_grid(trace, traffic, mine, engine, settings), strict=True
            )
        }
    return [done[(h.priced_by(settings.gpu), f)] for f, h in runs]


def engine_for(
    settings: FleetSettings,
    fitted: Fitted | None,
    tp: int = 1,
    prices: Prices | None = None,
) -> tuple[Engine, Pricing]:
    """The step cost of ``model`` on one GPU of ``tp`` of ``gpu`` (``stepcost.choose``): the
    calibrated model ``fitted`` where it is chosen, else the measured model, else the
    roofline; priced at ``prices`` (default: ``settings.prices`` read)."""
    shape, spec = settings.shape, device(settings.gpu)
    prices = prices or load_prices(settings.prices)
    cost = choose(shape, spec, tp, fitted, settings.cost_model)
    kv_bytes = float(shape.kv_bytes_per_token(settings.kv_dtype))
    engine = Engine(
        cost,
        settings.budget_tokens,
        settings.max_seqs,
        settings.router_settings,
        kv_bytes,
        settings.cache_answers,
    )
    return engine, Pricing(
        shape.name,
        gpu_key(settings.gpu),
        cost.source,
        cost.run_id,
        gpus=tp,
        gpu_hour=None if spec is None else prices.gpu_price(spec),
        prices=prices,
        kv_bytes_per_token=kv_bytes,
    )


#: Relative cost of a configuration by router, to hand out the longest tasks first (a router
#: that keeps a tree or reads every cache per request costs many times a fixed one).
_TASK_WEIGHT = {"cache-aware": 30.0, "kv-aware": 8.0, "least-loaded": 2.0}


def simulate_grid(
    trace: Trace,
    traffic: Traffic,
    grid: Sequence[Fleet],
    engine: Engine,
    settings: FleetSettings,
) -> list[FleetOutcome]:
    """Every configuration, in grid order. Where ``workers`` / ``dask_address`` say, each
    configuration is one task (heaviest first), the trace and traffic shipped to each worker
    once; when the grid has fewer configurations than the workers can run at once, a fixed
    router's replicas (independent: nothing else reaches them) are split into one task each."""
    if settings.dask_address is None and settings.workers == 1:
        return [simulate_fleet(trace, traffic, fleet, engine) for fleet in grid]
    wide = width(workers=settings.workers, dask_address=settings.dask_address)
    jobs: list[tuple] = []  # (configuration index, fleet, requests of one replica or None)
    for i, fleet in enumerate(grid):
        joined = fleet.tiers.store_blocks is not None  # a shared store joins the replicas
        split = len(grid) < wide and not joined and fleet.replicas > 1
        if split and resolve_router(fleet.router).fixed:
            routing = assign(trace, fleet.router, fleet.replicas, engine.routers, traffic.sessions)
            jobs += [(i, fleet, np.flatnonzero(routing == r)) for r in range(fleet.replicas)]
        else:
            jobs.append((i, fleet, None))
    results = fan_out(
        fleet_task,
        (trace, traffic),
        [(fleet, engine, requests) for _, fleet, requests in jobs],
        workers=settings.workers,
        dask_address=settings.dask_address,
        weights=[
            _TASK_WEIGHT.get(fleet.router, 1.0)
            * (1.0 if requests is None else len(requests) / trace.n_requests)
            for _, fleet, requests in jobs
        ],
    )
    out = []
    for i, fleet in enumerate(grid):
        mine = [(jobs[j][2], results[j]) for j in range(len(jobs)) if jobs[j][0] == i]
        out.append(mine[0][1] if mine[0][0] is None else merge_replicas(trace, fleet, mine))
    return out


def fleet_task(
    shared: tuple[Trace, Traffic], job: tuple[Fleet, Engine, np.ndarray | None]
) -> FleetOutcome:
    """One configuration, or one replica of a fixed router (``requests``: the positions routed
    to it): a task of :func:`simulate_grid`."""
    trace, traffic = shared
    fleet, engine, requests = job
    if requests is None:
        return simulate_fleet(trace, traffic, fleet, engine)
    return simulate_replica(trace, traffic, fleet, engine, requests)


def tables(
    trace: Trace,
    outcomes: Sequence[FleetOutcome],
    windows: Sequence[str],
    pricing: Pricing | Sequence[Pricing],
    hardware: Sequence[Hardware] | None = None,
) -> tuple[pa.Table, pa.Table]:
    """The rows of every configuration, all measured from the run's one steady start;
    ``pricing`` and ``hardware``: one for every configuration, or per configuration."""
    ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None))
    start = shared_start(trace, outcomes)
    groups = window_groups(trace, windows, start)
    prices = [pricing] * len(outcomes) if isinstance(pricing, Pricing) else list(pricing)
    kinds = list(hardware) if hardware is not None else [Hardware()] * len(outcomes)
    hits, reps = [], []
    for o, p, h in zip(outcomes, prices, kinds, strict=True):
        hits += hit_rate_rows(trace, o, ceiling, windows, start, p, groups, h)
        reps += replica_rows(trace, o, h)
    return (
        pa.Table.from_pylist(hits, schema=FLEET_HIT_RATES_SCHEMA),
        pa.Table.from_pylist(reps, schema=FLEET_REPLICAS_SCHEMA),
    )

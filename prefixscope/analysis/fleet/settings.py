"""The fleet grid's settings: every router × replica count × capacity × tier option × load
scale × engine a ``fleet`` run simulates, what prices its steps, and where its tasks run
(``grid.py`` runs them)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from prefixscope.analysis.cost.choice import check_kind
from prefixscope.analysis.cost.deployment import Deployment, parse_deployment
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.cost.resolved import ResolvesGpu, ResolvesModel, ResolvesPrices
from prefixscope.analysis.cost.savings import DEFAULT_GPU, DEFAULT_MODEL
from prefixscope.analysis.fleet._records import KV_AWARE
from prefixscope.analysis.fleet.caches import check_tiered_policy
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.hardware import Hardware, capacity_options, of_deployment
from prefixscope.analysis.fleet.replayed import Pins
from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.fleet.run import (
    DEFAULT_BUDGET,
    DEFAULT_MAX_SEQS,
    Engine,
    Fleet,
    Tiers,
)
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.fleet.tierspec import TierSpec, tiers_of
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.trace.warm import WarmStart
from prefixscope.analysis.trace.windows import check_windows


@dataclass(frozen=True)
class FleetSettings(ResolvesModel, ResolvesGpu, ResolvesPrices):
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
    #: Each kv-aware configuration with its view of the caches this many seconds old
    #: (``_stale.py``; 0: as they are); the other routers read no cache events and run at 0.
    router_delays: tuple[float, ...] = (0.0,)
    #: Each configuration under every one of these engines (``engines.ENGINES``).
    engines: tuple[str, ...] = ("ideal",)
    drams: tuple[TierSpec | None, ...] = (None,)
    stores: tuple[TierSpec | None, ...] = (None,)
    windows: tuple[str, ...] = ("all",)
    model: str = DEFAULT_MODEL
    kv_dtype: str = "bf16"
    #: A name or a GPU file, or the spec the command line resolved it to.
    gpu: str | GpuSpec = DEFAULT_GPU
    cost_model: str = "auto"
    #: Each replica one of these (``GPU[xTP]``): its KV pool is the capacity, unless
    #: ``capacities`` gives one (a what-if); its GPU prices the steps in ``gpu``'s place.
    #: As text, or as the command line parsed them.
    deployments: tuple[str | Deployment, ...] = ()
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
    #: Keep each request's miss budget (``budget.py``, table ``miss_budget``); False lets a
    #: fixed router's replicas run as separate tasks (the budget reads every replica's cache).
    miss_budget: bool = True
    #: A TOML file of prices (``cost/prices.py``; None: the defaults), or the prices the
    #: command line read from it: what the GPU-seconds saved are worth and what tiers cost.
    prices: str | Prices | None = None
    #: Where the caches start (``trace/warm.py``): empty, after the trace's first window, or
    #: as the captured KV events left the engine (each warm-up request routed as any).
    warm_start: WarmStart = field(default_factory=WarmStart)

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
        self.device  # noqa: B018 (resolved here, before any work)
        # each deployment at the smallest block (one that cannot fit, fits nowhere) and the
        # cost model it asks for
        for gpu, tp in priced_gpus(self):
            check_kind(self.cost_model, shape, gpu, tp)
        check_windows(self.windows)
        self.warm_start.check()
        if self.warm_start.source == "events" and self.policy == "ttl":
            raise ValueError(
                "ttl drops blocks by their idle time, which the events do not carry: warm ttl "
                "from the trace's first window"
            )
        if any(d != 0 for d in self.router_delays) and not any(
            resolve_router(r).kind == KV_AWARE for r in self.routers
        ):
            raise ValueError(
                "--router-delay lags the view of a router fed by the caches' events: add "
                "--router kv-aware"
            )
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
        self.price_table  # noqa: B018 (read here, before any work)
        Engine(
            StepCost(0, 0, 0, 0, 0, 1, 1, "check"),
            self.budget_tokens,
            self.max_seqs,
            self.router_settings,
        ).check()

    @cached_property
    def parsed_deployments(self) -> tuple[Deployment, ...]:
        """``deployments`` parsed once per settings, their GPU files read once."""
        return tuple(parse_deployment(d) for d in self.deployments)

    def tiers(self, block_size: int, gpu: GpuSpec | None = None) -> list[Tiers]:
        """Every DRAM × store option, in blocks of ``block_size``, a DRAM tier on the host link
        of ``gpu`` (default: ``gpu``'s) unless it names its own."""
        return [
            tiers_of(d, st, self.shape, block_size, self.kv_dtype, gpu or self.device)
            for d in self.drams
            for st in self.stores
        ]

    def grid(
        self,
        blocks: Sequence[int],
        gibs: Sequence[float | None] | None = None,
        tiers: Sequence[Tiers] | None = None,
    ) -> list[Fleet]:
        """Every replicas × capacity × tiers × load scale × router (× router delay, kv-aware)."""
        gibs = list(gibs) if gibs else [None] * len(blocks)
        return [
            Fleet(router, n, int(c), self.policy, float(s), g, t, e, self.ttl_s, self.pins, d)
            for e, n, (c, g), t, s, router in itertools.product(
                self.engines,
                self.replicas,
                zip(blocks, gibs, strict=True),
                list(tiers or [Tiers()]),
                self.load_scales,
                self.routers,
            )
            for d in (
                dict.fromkeys(float(x) for x in self.router_delays)
                if resolve_router(router).kind == KV_AWARE
                else (0.0,)
            )
        ]


def capacity_runs(
    settings: FleetSettings, block_size: int
) -> list[tuple[int, float | None, Hardware]]:
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
        blocks, gibs, settings.parsed_deployments, settings.shape, settings.device, block_size,
        settings.kv_dtype,
    )  # fmt: skip


def priced_gpus(settings: FleetSettings) -> list[tuple[GpuSpec | None, int]]:
    """The GPUs that price the steps (None: the CPU) and the TP they run at: each
    deployment's, else one ``gpu``."""
    hardware = [
        of_deployment(d, settings.shape, 1, settings.kv_dtype) for d in settings.parsed_deployments
    ]
    return [h.priced_by(settings.device) for h in hardware] or [(settings.device, 1)]

"""The SLO plan's settings: the deployments searched, the SLO, the load scales, routers, model,
cost model, prices, engine and windows (``slo_plan.py`` searches them), and what each
deployment's step costs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from prefixscope.analysis.cost.choice import Fitted, check_kind
from prefixscope.analysis.cost.deployment import Deployment, parse_deployment
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.cost.resolved import ResolvesModel, ResolvesPrices
from prefixscope.analysis.cost.savings import DEFAULT_MODEL
from prefixscope.analysis.fleet.disagg import link_for
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.routers import ROUTERS, resolve_router
from prefixscope.analysis.fleet.stepcost import StepCost, choose
from prefixscope.analysis.plan.search import Group
from prefixscope.analysis.plan.slo import Slo, parse_slo
from prefixscope.analysis.plan.space import Replica, replica_of, series_of
from prefixscope.analysis.plan.windows import (
    DEFAULT_WINDOW_S,
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    WHOLE,
)


@dataclass(frozen=True)
class PlanSloSettings(ResolvesModel, ResolvesPrices):
    """``deployments``: the replica kinds searched (``GPUxTP``); ``slo``: the targets
    (``slo.py``); ``load_scales``: one search each; ``routers``: every router by default;
    ``model`` / ``kv_dtype``: what the replicas serve; ``cost_model``: what prices a step
    (``cost/choice.py``; ``auto``: the calibrated model of the GPU at TP 1 where the warehouse
    holds one, else the measured model at the deployment's TP where it covers, else the
    roofline); ``prices``: a TOML file (``prices.py``); ``engine``: the
    fleet's KV pool model where this version's fleet has one; ``window_s``: the SLO is held
    in every window of this many seconds (``windows.WHOLE``: over the whole trace at once);
    ``per_window``: each window also searched alone, what a perfect autoscaler would run."""

    #: ``GPUxTP`` each, as text or as the command line parsed them.
    deployments: tuple[str | Deployment, ...]
    slo: str
    load_scales: tuple[float, ...] = (1.0,)
    routers: tuple[str, ...] = tuple(ROUTERS)
    model: str = DEFAULT_MODEL
    model_config: str | None = None
    kv_dtype: str = "bf16"
    cost_model: str = "auto"
    #: A TOML file of prices, or the prices the command line read from it.
    prices: str | Prices | None = None
    #: A KV pool that holds the running requests' blocks and the prefix cache both, as a
    #: server's does: the fleets priced can exist (``ideal`` keeps every running request's KV
    #: beside a full cache, a lower bound; docs/plan.md).
    engine: str = "vllm"
    workers: int | None = 1
    dask_address: str | None = None
    window_s: float = DEFAULT_WINDOW_S
    per_window: bool = False  # each window also sized alone (``per_window.py``)
    #: also the fewest GPUs split into prefill and decode pools, the KV moving over this link
    #: (``rdma``, ``nvlink``, ``inf`` or GB/s: ``fleet/disagg.py``); None: colocated only
    disagg_link: str | None = None

    @cached_property
    def parsed(self) -> dict[str | Deployment, Deployment]:
        """Each deployment as given → parsed, once per settings (a GPU file read once)."""
        return {d: parse_deployment(d) for d in self.deployments}

    def check(self) -> Slo:
        """Every setting before any work: ValueError in one line otherwise."""
        slo = parse_slo(self.slo)
        if not self.deployments:
            raise ValueError("give at least one deployment — e.g. --deployments h100x1,h200x1")
        if not self.load_scales or any(not s > 0 for s in self.load_scales):
            raise ValueError(f"load scales must be positive, got {list(self.load_scales)}")
        for r in self.routers:
            resolve_router(r)
        resolve_engine(self.engine)  # the one list of engines (``fleet/engines.py``)
        self.price_table  # noqa: B018 (read here, before any work)
        if not (self.window_s == WHOLE or MIN_WINDOW_S <= self.window_s <= MAX_WINDOW_S):
            raise ValueError(
                f"an SLO window is at least {MIN_WINDOW_S:g} s, got {self.window_s:g} — "
                "give --slo-window SECONDS or all"
            )
        if self.per_window and self.window_s == WHOLE:
            raise ValueError(
                "--per-window sizes each SLO window alone, and --slo-window all makes one — give "
                "--slo-window SECONDS (e.g. 15m)"
            )
        shape = self.shape
        dummy = StepCost(0, 0, 0, 0, 0, 1, 1, "check")
        for d in self.parsed.values():  # at one token a block: none of one fits no larger one
            replica_of(d, shape, 1, self.kv_dtype, dummy)
            check_kind(self.cost_model, shape, d.gpu, d.tp)
            if self.disagg_link is not None:
                link_for(self.disagg_link, d.gpu).check()
        return slo


def step_cost(
    settings: PlanSloSettings, deployment: str | Deployment, fitted: Fitted | None
) -> StepCost:
    """What prices a step of ``deployment`` serving ``settings.shape`` (``stepcost.choose``):
    the calibrated model at TP 1 where allowed and held, else the measured model at TP where
    it covers, else the roofline at TP."""
    d = settings.parsed[deployment]
    return choose(settings.shape, d.gpu, d.tp, fitted, settings.cost_model)


def search_groups(
    replicas: Sequence[Replica],
    settings: PlanSloSettings,
    prices: Prices,
    block_size: int,
    cachings: tuple[bool, ...] = (True, False),
    kinds: set[tuple] | None = None,
) -> list[Group]:
    """What is searched at each load scale, caching on and off: every series, tiered where
    caching is on, but no store without a DRAM tier where the engine writes its store from
    DRAM (``sglang``, ``fleet/engines.py``)."""
    store_from_dram = resolve_engine(settings.engine).store_from_dram is not None
    groups = []
    for scale in settings.load_scales:
        for caching in cachings:
            space = series_of(list(replicas), tuple(settings.routers), prices, block_size, caching)
            if store_from_dram:
                space = [s for s in space if s.store_gib is None or s.dram_gib]
            if kinds is not None:
                space = [s for s in space if series_kind(s) in kinds]
            groups.append(Group(scale, caching, tuple(space)))
    return groups


def answer_kind(row: dict) -> tuple:
    """An answer's fleet kind: what a series fixes, all but the replica count."""
    return (row["deployment"], row["router"], row["dram_gib_per_replica"], row["store_gib"])


def series_kind(s) -> tuple:  # type: ignore[no-untyped-def]
    return (s.replica.deployment, s.router, s.dram_gib, s.store_gib)

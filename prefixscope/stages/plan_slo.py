"""Stage ``plan-slo``: the cheapest fleet of deployments that meets a latency SLO, per load
scale, with prefix caching on and off → ``plan_slo_fleets`` and ``plan_slo_answers``
(``analysis/plan/search.py`` says how the space is searched)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.costmodel import CostModel
from prefixscope.analysis.cost.deployment import parse_deployment
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.savings import DEFAULT_MODEL
from prefixscope.analysis.fanout import fan_out
from prefixscope.analysis.fleet.routers import ROUTERS, resolve_router
from prefixscope.analysis.fleet.stepcost import StepCost, from_cost_model, from_roofline
from prefixscope.analysis.plan.nocache import without_prefix_cache
from prefixscope.analysis.plan.prices import load_prices
from prefixscope.analysis.plan.probe import HAS_ENGINE, Shared, simulate_probe
from prefixscope.analysis.plan.search import Group, Outcome, Probe, Result, search
from prefixscope.analysis.plan.slo import Slo, parse_slo
from prefixscope.analysis.plan.slo_tables import answers_table, fleets_table
from prefixscope.analysis.plan.space import Replica, replica_of, series_of
from prefixscope.analysis.trace.load import load_trace
from prefixscope.stages.fleet import COST_KINDS, load_traffic
from prefixscope.stages.outcomes import calibrated

ENGINES = ("ideal", "vllm", "sglang")


@dataclass(frozen=True)
class PlanSloSettings:
    """``deployments``: the replica kinds searched (``GPUxTP``); ``slo``: the targets
    (``slo.py``); ``load_scales``: one search each; ``routers``: every router by default;
    ``model`` / ``kv_dtype``: what the replicas serve; ``cost_model``: what prices a step
    (``auto``: the calibrated model of the GPU at TP 1 where the warehouse holds one, else the
    roofline at the deployment's TP); ``prices``: a TOML file (``prices.py``); ``engine``: the
    fleet's KV pool model where this version's fleet has one."""

    deployments: tuple[str, ...]
    slo: str
    load_scales: tuple[float, ...] = (1.0,)
    routers: tuple[str, ...] = tuple(ROUTERS)
    model: str = DEFAULT_MODEL
    model_config: str | None = None
    kv_dtype: str = "bf16"
    cost_model: str = "auto"
    prices: str | None = None
    engine: str = "ideal"
    workers: int | None = 1
    dask_address: str | None = None

    @property
    def shape(self) -> ModelShape:
        return resolve_model(self.model, self.model_config)

    def check(self) -> Slo:
        """Every setting before any work: ValueError in one line otherwise."""
        slo = parse_slo(self.slo)
        if not self.deployments:
            raise ValueError("give at least one deployment — e.g. --deployments h100x1,h200x1")
        if not self.load_scales or any(not s > 0 for s in self.load_scales):
            raise ValueError(f"load scales must be positive, got {list(self.load_scales)}")
        for r in self.routers:
            resolve_router(r)
        if self.cost_model not in COST_KINDS:
            raise ValueError(
                f"unknown cost model {self.cost_model!r}; known: {', '.join(COST_KINDS)}"
            )
        if self.engine not in ENGINES or (self.engine != "ideal" and not HAS_ENGINE):
            known = ENGINES if HAS_ENGINE else ENGINES[:1]
            raise ValueError(f"unknown engine {self.engine!r}; known: {', '.join(known)}")
        load_prices(self.prices)
        shape = self.shape
        dummy = StepCost(0, 0, 0, 0, 0, 1, 1, "check")
        for text in self.deployments:  # at one token a block: none of one fits no larger one
            replica_of(text, shape, 1, self.kv_dtype, dummy)
        return slo


@dataclass(frozen=True)
class PlanSloResult:
    run_id: str
    outcomes: tuple[Outcome, ...]
    fleets: pa.Table
    answers: pa.Table


def run(wh: str | Path, settings: PlanSloSettings) -> PlanSloResult:
    slo = settings.check()
    prices = load_prices(settings.prices)
    shape = settings.shape
    with warehouse.StageRun(wh, "plan-slo", settings) as run:
        with run.reading() as con:
            trace = load_trace(con)
            traffic = load_traffic(con)
            fitted = {
                d: calibrated(con, shape, parse_deployment(d).gpu.name)
                for d in settings.deployments
                if settings.cost_model != "roofline" and parse_deployment(d).tp == 1
            }
        replicas = [
            replica_of(d, shape, trace.block_size, settings.kv_dtype,
                       step_cost(settings, shape, d, fitted.get(d)))
            for d in settings.deployments
        ]  # fmt: skip
        outcomes = plan_search(trace, traffic, replicas, slo, settings, prices)
        fleets = fleets_table(outcomes, settings.engine)
        answers = answers_table(outcomes, slo)
        with run.publishing() as con:
            warehouse.append(con, "plan_slo_fleets", fleets, run.run_id)
            warehouse.append(con, "plan_slo_answers", answers, run.run_id)
    return PlanSloResult(run.run_id, tuple(outcomes), fleets, answers)


def step_cost(
    settings: PlanSloSettings,
    shape: ModelShape,
    deployment: str,
    fitted: tuple[str, tuple[float, ...], tuple[float, float]] | None,
) -> StepCost:
    """The calibrated model at TP 1 where allowed and held, else the roofline at TP."""
    d = parse_deployment(deployment)
    if fitted is not None and d.tp == 1:
        run_id, coefficients, knees = fitted
        return from_cost_model(CostModel(coefficients, knees), run_id)
    if settings.cost_model == "calibrated":
        raise ValueError(
            f"no calibrated cost model of {shape.name} on {d.name} (calibrations are of one "
            "GPU) — price with --cost-model roofline or auto"
        )
    return from_roofline(shape, d.gpu, tp=d.tp)


def plan_search(
    trace, traffic, replicas: Sequence[Replica], slo: Slo, settings: PlanSloSettings, prices
) -> list[Outcome]:  # type: ignore[no-untyped-def]
    """Every load scale with caching on (every tier and store) and off (none: with no block
    repeating, a tier only adds cost), searched in rounds (``search.py``)."""
    routers = tuple(settings.routers)
    groups = []
    for scale in settings.load_scales:
        for caching in (True, False):
            space = series_of(list(replicas), routers, prices, trace.block_size, tiered=caching)
            groups.append(Group(scale, caching, tuple(space)))
    shared = Shared(trace.warm(), without_prefix_cache(trace).warm(), traffic, slo, settings.engine)
    local = settings.dask_address is None and settings.workers == 1

    def run_round(probes: Sequence[Probe]) -> list[Result]:
        if local:
            return [simulate_probe(shared, p) for p in probes]
        # three shared parts (the fan-out keeps four scattered): the SLO and engine ride
        # with each probe
        return fan_out(
            probe_task,
            (shared.trace, shared.fresh, shared.traffic),
            [(p, slo, settings.engine) for p in probes],
            workers=settings.workers,
            dask_address=settings.dask_address,
            weights=[p.replicas * (30.0 if p.series.router == "cache-aware" else 1.0)
                     for p in probes],  # fmt: skip
        )

    return search(groups, slo, run_round)


def probe_task(shared: tuple, item: tuple) -> Result:
    """One fleet of the search (a task of ``fan_out``): ``shared`` the trace, the trace with
    caching off and the traffic; ``item`` the probe, the SLO and the engine."""
    probe, slo, engine = item
    return simulate_probe(Shared(*shared, slo, engine), probe)

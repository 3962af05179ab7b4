"""Stage ``plan-slo``: the cheapest fleet of deployments that meets a latency SLO in every
window of the trace, per load scale, with prefix caching on and off → ``plan_slo_fleets`` and
``plan_slo_answers`` (``analysis/plan/search.py`` says how the space is searched,
``analysis/plan/held.py`` how the windows are)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import resources, warehouse
from prefixscope.analysis.cost.choice import Fitted, check_kind, wants_calibration
from prefixscope.analysis.cost.deployment import parse_deployment
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.prices import Prices, load_prices
from prefixscope.analysis.cost.savings import DEFAULT_MODEL
from prefixscope.analysis.fanout import fan_out, on_every_worker
from prefixscope.analysis.fleet._records import kept_nodes, release_kept
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.routers import ROUTERS, resolve_router
from prefixscope.analysis.fleet.stepcost import StepCost, choose
from prefixscope.analysis.forked import session
from prefixscope.analysis.plan.held import Held, Task, hold
from prefixscope.analysis.plan.probe import (
    Part,
    Shared,
    cut,
    simulate_run,
    simulate_window,
)
from prefixscope.analysis.plan.search import Group, Outcome
from prefixscope.analysis.plan.slo import Slo, parse_slo
from prefixscope.analysis.plan.slo_tables import (
    PLAN_SLO_ANSWERS_SCHEMA,
    answer_rows,
    fleets_table,
)
from prefixscope.analysis.plan.space import Replica, replica_of, series_of
from prefixscope.analysis.plan.uncertainty import slower, slower_pct, with_range
from prefixscope.analysis.plan.windows import (
    DEFAULT_WINDOW_S,
    MAX_WINDOW_S,
    MIN_WINDOW_S,
    WHOLE,
    Window,
    busiest,
    split,
)
from prefixscope.analysis.trace.load import load_trace
from prefixscope.stages.fleet import load_traffic
from prefixscope.stages.outcomes import calibrated


@dataclass(frozen=True)
class PlanSloSettings:
    """``deployments``: the replica kinds searched (``GPUxTP``); ``slo``: the targets
    (``slo.py``); ``load_scales``: one search each; ``routers``: every router by default;
    ``model`` / ``kv_dtype``: what the replicas serve; ``cost_model``: what prices a step
    (``cost/choice.py``; ``auto``: the calibrated model of the GPU at TP 1 where the warehouse
    holds one, else the measured model at the deployment's TP where it covers, else the
    roofline); ``prices``: a TOML file (``prices.py``); ``engine``: the
    fleet's KV pool model where this version's fleet has one; ``window_s``: the SLO is held
    in every window of this many seconds (``windows.WHOLE``: over the whole trace at once)."""

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
    window_s: float = DEFAULT_WINDOW_S

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
        resolve_engine(self.engine)  # the one list of engines (``fleet/engines.py``)
        load_prices(self.prices)
        if not (self.window_s == WHOLE or MIN_WINDOW_S <= self.window_s <= MAX_WINDOW_S):
            raise ValueError(
                f"an SLO window is at least {MIN_WINDOW_S:g} s, got {self.window_s:g} — "
                "give --slo-window SECONDS or all"
            )
        shape = self.shape
        dummy = StepCost(0, 0, 0, 0, 0, 1, 1, "check")
        for text in self.deployments:  # at one token a block: none of one fits no larger one
            replica_of(text, shape, 1, self.kv_dtype, dummy)
            d = parse_deployment(text)
            check_kind(self.cost_model, shape, d.gpu, d.tp)
        return slo


@dataclass(frozen=True)
class Searched:
    """The search's answers, with the windows each was held in (``held.py``)."""

    outcomes: tuple[Outcome, ...]
    held: tuple[Held, ...]
    windows: tuple[Window, ...]
    busiest: Window


@dataclass(frozen=True)
class PlanSloResult:
    run_id: str
    outcomes: tuple[Outcome, ...]
    fleets: pa.Table
    answers: pa.Table
    searched: Searched | None = None
    slower: Searched | None = None  # the range's search (measured steps only)


def plan_for_slo(wh: str | Path, settings: PlanSloSettings) -> PlanSloResult:
    slo = settings.check()
    prices = load_prices(settings.prices)
    shape = settings.shape
    with warehouse.StageRun(wh, "plan-slo", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            traffic = load_traffic(con)
            fitted = {
                d: calibrated(con, shape, parse_deployment(d).gpu)
                for d in settings.deployments
                if wants_calibration(settings.cost_model, parse_deployment(d).tp)
            }
        replicas = [
            replica_of(d, shape, trace.block_size, settings.kv_dtype,
                       step_cost(settings, shape, d, fitted.get(d)))
            for d in settings.deployments
        ]  # fmt: skip
        searched = plan_search(trace, traffic, replicas, slo, settings, prices)
        fleets = fleets_table(searched.outcomes, settings.engine, searched.windows)
        rows = answer_rows(searched.outcomes, slo, searched.held, searched.windows,
                           settings.window_s)  # fmt: skip
        sources = sorted({r.engine.cost.source for r in replicas})
        pct, slow_rows, slow = None, [], None
        kinds = {answer_kind(r) for r in rows if r["prefix_caching"] and r["met"]}
        if "measured" in sources and kinds:
            # how the answer moves within the measured model's error: the answer's own fleet
            # kinds searched again, caching on, every measured step that much slower
            # (``plan/uncertainty.py``)
            pct = slower_pct()
            resources.give_back_heap()  # the first search's spans and lists, gone first
            slow = plan_search(trace, traffic, slower(replicas, pct), slo, settings, prices,
                               cachings=(True,), kinds=kinds)  # fmt: skip
            slow_rows = answer_rows(slow.outcomes, slo, slow.held, slow.windows, settings.window_s)
        with_range(rows, slow_rows, pct, "+".join(sources))
        answers = pa.Table.from_pylist(rows, schema=PLAN_SLO_ANSWERS_SCHEMA)
        with stage_run.publishing() as con:
            warehouse.append(con, "plan_slo_fleets", fleets, stage_run.run_id)
            warehouse.append(con, "plan_slo_answers", answers, stage_run.run_id)
    return PlanSloResult(stage_run.run_id, searched.outcomes, fleets, answers, searched, slow)


def step_cost(
    settings: PlanSloSettings,
    shape: ModelShape,
    deployment: str,
    fitted: Fitted | None,
) -> StepCost:
    """What prices a step of ``deployment`` (``stepcost.choose``): the calibrated model at
    TP 1 where allowed and held, else the measured model at TP where it covers, else the
    roofline at TP."""
    d = parse_deployment(deployment)
    return choose(shape, d.gpu, d.tp, fitted, settings.cost_model)


def search_groups(
    replicas: Sequence[Replica],
    settings: PlanSloSettings,
    prices: Prices,
    block_size: int,
    cachings: tuple[bool, ...] = (True, False),
    kinds: set[tuple] | None = None,
) -> list[Group]:
    """What is searched at each load scale, caching on and off: every series, tiered where
    caching is on and the engine is ``ideal`` (a KV pool is HBM alone, ``fleet/engines.py``)."""
    tierable = not resolve_engine(settings.engine).pooled
    groups = []
    for scale in settings.load_scales:
        for caching in cachings:
            tiered = caching and tierable
            space = series_of(list(replicas), tuple(settings.routers), prices, block_size, tiered)
            if kinds is not None:
                space = [s for s in space if series_kind(s) in kinds]
            groups.append(Group(scale, caching, tuple(space)))
    return groups


def plan_search(
    trace,
    traffic,
    replicas: Sequence[Replica],
    slo: Slo,
    settings: PlanSloSettings,
    prices,
    cachings: tuple[bool, ...] = (True, False),
    kinds: set[tuple] | None = None,
) -> Searched:  # type: ignore[no-untyped-def]
    """Every load scale with caching on (every tier and store) and off (none: with no block
    repeating, a tier only adds cost), searched on the busiest window and held in every window
    (``held.py``), in rounds (``search.py``). ``cachings``: which of the two to search;
    ``kinds``: only the series of these (deployment, router, DRAM, store) (:func:`answer_kind`)."""
    groups = search_groups(replicas, settings, prices, trace.block_size, cachings, kinds)
    windows = split(trace, settings.window_s)
    start = busiest(windows)
    spans: dict[tuple[int, bool], tuple] = {}
    shared = Shared(trace, traffic, slo, settings.engine, windows, spans)
    local = settings.dask_address is None and settings.workers == 1
    shipped: dict[str, object] = {}

    def run_tasks(tasks: Sequence[Task]) -> list[list[Part]]:
        # the spans of the windows searched are cut once, here, before any worker starts
        for t in tasks:
            if t.search:
                key = (t.windows[0], t.probe.prefix_caching)
                if key not in spans:
                    w = windows[t.windows[0]]
                    spans[key] = cut(trace, traffic, w.warm, w.end, t.probe.prefix_caching)
        if local:
            return [probe_task(shared, t) for t in tasks]
        # parts shipped apart, so that a cluster keeps the trace it was sent once while the
        # spans grow (``fanout.scattered``); the same object while they do not, so that forked
        # workers live from round to round with what they hold (``forked.session``)
        if shipped.get("spans") != set(spans):
            shipped["spans"] = set(spans)
            shipped["parts"] = (trace, traffic, (slo, settings.engine, windows), dict(spans))
        return fan_out(
            probe_task,
            shipped["parts"],
            tasks,
            workers=settings.workers,
            dask_address=settings.dask_address,
            weights=[task_weight(trace, windows, t) for t in tasks],
            memory=[task_bytes(trace, windows, t, spans) for t in tasks],
        )

    def lookups(first: int, end: int) -> int:
        return int(trace.offsets[end] - trace.offsets[first])

    try:
        with kept_nodes(), session():
            outcomes, held = hold(groups, slo, windows, start, run_tasks, lookups)
    finally:
        if settings.dask_address:  # the cluster's workers outlive the stage
            on_every_worker(settings.dask_address, release_kept)
    return Searched(tuple(outcomes), tuple(held), windows, start)


def answer_kind(row: dict) -> tuple:
    """An answer's fleet kind: what a series fixes, all but the replica count."""
    return (row["deployment"], row["router"], row["dram_gib_per_replica"], row["store_gib"])


def series_kind(s) -> tuple:  # type: ignore[no-untyped-def]
    return (s.replica.deployment, s.router, s.dram_gib, s.store_gib)


def probe_task(shared: Shared | tuple, task: Task) -> list[Part]:
    """One task of the search (a task of ``fan_out``): a fleet on one window, or a run of
    windows (``held.py``). ``shared``: the search's, or its parts as ``plan_search`` ships
    them. The lists' node arrays are kept between a worker's tasks, for the stage."""
    if isinstance(shared, tuple):
        trace, traffic, (slo, engine, windows), spans = shared
        shared = Shared(trace, traffic, slo, engine, windows, spans)
    with kept_nodes(persist=True):
        if task.search:
            return [simulate_window(shared, task.probe, task.windows[0])]
        return simulate_run(shared, task.probe, task.windows, task.measured)


def task_weight(trace, windows, task: Task) -> float:  # type: ignore[no-untyped-def]
    """A task's expected cost: its lookups × its replicas (a cache-aware router scores every
    replica's tree: some 30 times as long)."""
    p = task.probe
    first, end = windows[task.windows[0]].warm, windows[task.windows[-1]].end
    router = 30.0 if p.series.router == "cache-aware" else 1.0
    return float(trace.offsets[end] - trace.offsets[first]) * (1 + p.replicas / 8) * router


def task_bytes(trace, windows, task: Task, spans=None) -> int:  # type: ignore[no-untyped-def]
    """What a task holds at most: its span (blocks, ids, hashes, parents and per-lookup tokens,
    about 28 bytes a lookup), each replica's lists over the span's distinct blocks (8 bytes per
    block, replica and list: the cache, the router's tree, a DRAM tier, and 8 per block for
    their masks) and some 250 bytes a request of state and results. Distinct blocks are the
    span's own where it was cut already (``spans``), else every lookup counts as one."""
    p = task.probe
    first, end = windows[task.windows[0]].warm, windows[task.windows[-1]].end
    lookups = int(trace.offsets[end] - trace.offsets[first])
    cut_already = (spans or {}).get((task.windows[0], p.prefix_caching)) if task.search else None
    distinct = cut_already[0].n_unique if cut_already is not None else lookups
    lists = 1 + (p.series.router == "cache-aware") + (p.series.tiers.dram_blocks > 0)
    return 28 * lookups + 8 * distinct * lists * (1 + p.replicas) + 250 * (end - first)

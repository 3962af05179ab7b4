"""A fleet grid run (``settings.py`` says what it holds): each (GPU, TP) priced under its own
engine, the configurations fanned out where the settings say, and their tables, all measured
from the run's one steady start. Plain computation on a loaded trace: the ``fleet`` stage
loads, calls :func:`simulate_settings` and appends."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from prefixscope.analysis.cost.choice import Fitted
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.cost.savings import gpu_key
from prefixscope.analysis.fanout import fan_out, width
from prefixscope.analysis.fleet.assign import assign
from prefixscope.analysis.fleet.budget import KEYS, budget_rows
from prefixscope.analysis.fleet.budget import table as budget_table
from prefixscope.analysis.fleet.hardware import Hardware
from prefixscope.analysis.fleet.merge import merge_replicas
from prefixscope.analysis.fleet.routers import resolve_router
from prefixscope.analysis.fleet.run import (
    Engine,
    Fleet,
    FleetOutcome,
    Traffic,
    simulate_fleet,
    simulate_replica,
)
from prefixscope.analysis.fleet.settings import FleetSettings, capacity_runs, priced_gpus
from prefixscope.analysis.fleet.stepcost import choose
from prefixscope.analysis.fleet.tables import (
    FLEET_HIT_RATES_SCHEMA,
    FLEET_REPLICAS_SCHEMA,
    Pricing,
    hit_rate_rows,
    replica_rows,
    shared_start,
    window_groups,
)
from prefixscope.analysis.fleet.warmed import measured_outcome, warm_traffic
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.trace.tail import tail, tail_start
from prefixscope.analysis.trace.warm import Warmed, cold


def simulate_settings(
    trace: Trace,
    traffic: Traffic,
    settings: FleetSettings,
    fitted: dict[tuple[str, int], Fitted | None],
    warm: Callable[[Trace], Warmed] = cold,
) -> tuple[pa.Table, pa.Table, pa.Table, list[FleetOutcome]]:
    """Every configuration of ``settings`` on ``trace`` (its last ``max_lookups`` where it
    holds more), each (GPU, TP) of ``priced_gpus(settings)`` priced by its calibrated model in
    ``fitted`` where it has one: the hit-rate, replica and miss-budget tables, and the
    outcomes in grid order, all of the measured requests. ``warm``: the warm start of the
    trace simulated (``trace/warm.py``; its warm-up replayed, never measured)."""
    first = tail_start(trace, settings.max_lookups)
    if first:
        trace = tail(trace, first)
        traffic = traffic.take(np.arange(first, first + trace.n_requests))
    if settings.vllm_blocks:  # every engine; ``vllm`` always counts so
        trace = full_blocks_only(trace)
    warmed = warm(trace)
    traffic = warm_traffic(warmed, traffic)
    trace = warmed.trace
    priced = {
        (g, tp): engine_for(settings, fitted.get((g, tp)), tp, gpu=g)
        for g, tp in dict.fromkeys(priced_gpus(settings))
    }
    # a deployment's DRAM tier runs on its own GPU's host link
    runs = [
        (f, h)
        for b, g, h in capacity_runs(settings, trace.block_size)
        for f in settings.grid(
            [b], [g], settings.tiers(trace.block_size, h.priced_by(settings.device)[0])
        )
    ]
    outcomes = simulate_by_gpu(trace, traffic, runs, priced, settings)
    pricing = [priced[h.priced_by(settings.device)][1] for _, h in runs]
    n = warmed.n_warm
    outcomes = [measured_outcome(o, n) for o in outcomes]
    ceiling = hit_tokens(warmed.measured, POLICIES["ceiling"].hit_blocks(trace, None)[n:])
    hit_rates, replicas, budget = tables(
        warmed.measured, outcomes, settings.windows, pricing, [h for _, h in runs], ceiling
    )
    start = {"warm_start": warmed.start.label, "warm_requests": n}
    for name, value in start.items():
        column = pa.array([value] * hit_rates.num_rows, FLEET_HIT_RATES_SCHEMA.field(name).type)
        hit_rates = hit_rates.set_column(hit_rates.schema.get_field_index(name), name, column)
    return hit_rates, replicas, budget, outcomes


def simulate_by_gpu(
    trace: Trace,
    traffic: Traffic,
    runs: Sequence[tuple[Fleet, Hardware]],
    priced: dict[tuple[GpuSpec | None, int], tuple[Engine, Pricing]],
    settings: FleetSettings,
) -> list[FleetOutcome]:
    """Each configuration's outcome, in ``runs`` order: those of one (GPU, TP) under its
    engine, a configuration that two rows share (deployments of one GPU and TP at one what-if
    capacity) simulated once."""
    done: dict[tuple[tuple[GpuSpec | None, int], Fleet], FleetOutcome] = {}
    for key, (engine, _) in priced.items():
        mine = list(dict.fromkeys(f for f, h in runs if h.priced_by(settings.device) == key))
        done |= {
            (key, f): o
            for f, o in zip(
                mine, simulate_grid(trace, traffic, mine, engine, settings), strict=True
            )
        }
    return [done[(h.priced_by(settings.device), f)] for f, h in runs]


def engine_for(
    settings: FleetSettings,
    fitted: Fitted | None,
    tp: int = 1,
    prices: Prices | None = None,
    gpu: GpuSpec | None = None,
) -> tuple[Engine, Pricing]:
    """The step cost of ``model`` on one GPU of ``tp`` of ``gpu`` (resolved; default:
    ``settings.device``; ``stepcost.choose``): the calibrated model ``fitted`` where it is
    chosen, else the measured model, else the roofline; priced at ``prices`` (default:
    ``settings.price_table``)."""
    spec = gpu or settings.device
    shape = settings.shape
    prices = prices or settings.price_table
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
        gpu_key(spec),
        cost.source,
        cost.run_id,
        gpus=tp,
        gpu_hour=None if spec is None else prices.gpu_price(spec),
        prices=prices,
        kv_bytes_per_token=kv_bytes,
        step=cost,
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
    once; when the grid has fewer configurations than the workers can run at once and the
    miss budget is not asked for (``settings.miss_budget``: it reads every replica's cache at
    each lookup), a fixed router's replicas (independent: nothing else reaches them) are split
    into one task each."""
    if settings.dask_address is None and settings.workers == 1:
        return [
            simulate_fleet(trace, traffic, fleet, engine, budget=settings.miss_budget)
            for fleet in grid
        ]
    wide = width(workers=settings.workers, dask_address=settings.dask_address)
    jobs: list[tuple] = []  # (configuration index, fleet, requests of one replica or None)
    for i, fleet in enumerate(grid):
        joined = fleet.tiers.store_blocks is not None  # a shared store joins the replicas
        split = len(grid) < wide and not joined and fleet.replicas > 1
        split = split and not settings.miss_budget
        if split and resolve_router(fleet.router).fixed:
            routing = assign(trace, fleet.router, fleet.replicas, engine.routers, traffic.sessions)
            jobs += [(i, fleet, np.flatnonzero(routing == r)) for r in range(fleet.replicas)]
        else:
            jobs.append((i, fleet, None))
    results = fan_out(
        fleet_task,
        (trace, traffic),
        [(fleet, engine, requests, settings.miss_budget) for _, fleet, requests in jobs],
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
    shared: tuple[Trace, Traffic], job: tuple[Fleet, Engine, np.ndarray | None, bool]
) -> FleetOutcome:
    """One configuration (with its miss budget where asked), or one replica of a fixed router
    (``requests``: the positions routed to it): a task of :func:`simulate_grid`."""
    trace, traffic = shared
    fleet, engine, requests, budget = job
    if requests is None:
        return simulate_fleet(trace, traffic, fleet, engine, budget=budget)
    return simulate_replica(trace, traffic, fleet, engine, requests)


def tables(
    trace: Trace,
    outcomes: Sequence[FleetOutcome],
    windows: Sequence[str],
    pricing: Pricing | Sequence[Pricing],
    hardware: Sequence[Hardware] | None = None,
    ceiling: np.ndarray | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The rows of every configuration, all measured from the run's one steady start:
    ``fleet_hit_rates``, ``fleet_replicas`` and ``miss_budget`` (the configurations that kept
    one); ``pricing`` and ``hardware``: one for every configuration, or per configuration;
    ``ceiling``: the unbounded cache's hit tokens per request, where the run has them (a warm
    start's), else of ``trace`` from cold."""
    if ceiling is None:
        ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None))
    start = shared_start(trace, outcomes)
    groups = window_groups(trace, windows, start)
    prices = [pricing] * len(outcomes) if isinstance(pricing, Pricing) else list(pricing)
    kinds = list(hardware) if hardware is not None else [Hardware()] * len(outcomes)
    hits, reps, misses = [], [], []
    for o, p, h in zip(outcomes, prices, kinds, strict=True):
        mine = hit_rate_rows(trace, o, ceiling, windows, start, p, groups, h)
        hits += mine
        reps += replica_rows(trace, o, h)
        if o.miss is not None:
            misses += budget_rows(trace, o, {k: mine[0][k] for k in KEYS}, groups, p)
    return (
        pa.Table.from_pylist(hits, schema=FLEET_HIT_RATES_SCHEMA),
        pa.Table.from_pylist(reps, schema=FLEET_REPLICAS_SCHEMA),
        budget_table(misses),
    )

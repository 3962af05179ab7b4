"""The SLO plan on a loaded trace: the search (``search.py``) held in every window
(``held.py``), its fleets run here, on forked workers or on a Dask cluster, and how its answer
moves within the measured model's error (``uncertainty.py``). The ``plan-slo`` stage loads,
calls :func:`plan_slo` and appends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from prefixscope import resources
from prefixscope.analysis.cost.choice import Fitted
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.fanout import client_for, fan_out, on_every_worker, width
from prefixscope.analysis.fleet._records import kept_nodes, release_kept
from prefixscope.analysis.fleet.disagg import link_for
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.pool_inputs import longest_blocks
from prefixscope.analysis.fleet.run import Traffic
from prefixscope.analysis.forked import session
from prefixscope.analysis.plan.disagg_plan import Span, disagg_row, search_disagg
from prefixscope.analysis.plan.disagg_plan import table as disagg_table
from prefixscope.analysis.plan.held import POOL_RUN_LOOKUPS, RUN_LOOKUPS, Held, Task, hold
from prefixscope.analysis.plan.per_window import Sized, gpu_hours, size_each_window
from prefixscope.analysis.plan.probe import (
    Part,
    Shared,
    cut,
    run_key,
    simulate_run,
    simulate_window,
)
from prefixscope.analysis.plan.search import Outcome, Probe
from prefixscope.analysis.plan.slo import Slo
from prefixscope.analysis.plan.slo_settings import (
    PlanSloSettings,
    answer_kind,
    search_groups,
    step_cost,
)
from prefixscope.analysis.plan.slo_tables import (
    PLAN_SLO_ANSWERS_SCHEMA,
    answer_rows,
    fleets_table,
    windows_table,
    with_gpu_hours,
)
from prefixscope.analysis.plan.space import Replica, refuse_short_pools, replica_of, tiers_for
from prefixscope.analysis.plan.uncertainty import slower, slower_pct, with_range
from prefixscope.analysis.plan.windows import (
    Window,
    busiest,
    split,
)
from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class Searched:
    """The search's answers, with the windows each was held in (``held.py``)."""

    outcomes: tuple[Outcome, ...]
    held: tuple[Held, ...]
    windows: tuple[Window, ...]
    busiest: Window
    sized: tuple[Sized, ...] = ()  # each window alone, where asked (``per_window.py``)


@dataclass(frozen=True)
class SloPlan:
    """The search's answers (``searched``), and where the steps are priced by the measured
    model, the search of the answer's fleet kinds with every step slower by its error
    (``slower``); the fleets simulated and the answers as tables."""

    searched: Searched
    slower: Searched | None
    fleets: pa.Table
    answers: pa.Table
    windows: pa.Table  # ``plan_slo_windows``: empty unless each window was sized alone
    disagg: pa.Table | None = None  # ``plan_slo_disagg``: with ``disagg_link`` only


def plan_slo(
    trace: Trace,
    traffic: Traffic,
    settings: PlanSloSettings,
    fitted: dict[str, Fitted | None],
    prices: Prices,
    slo: Slo,
) -> SloPlan:
    """The cheapest fleets of ``settings`` meeting ``slo`` on ``trace``, each deployment's
    steps priced by its calibrated model in ``fitted`` where it has one (``step_cost``), and
    how the answer moves within the measured model's error."""
    shape = settings.shape
    replicas = [
        replica_of(settings.parsed[d], shape, trace.block_size, settings.kv_dtype,
                   step_cost(settings, d, fitted.get(d)))
        for d in settings.deployments
    ]  # fmt: skip
    if resolve_engine(settings.engine).pooled:
        refuse_short_pools(replicas, longest_blocks(trace, traffic.output_tokens), settings.engine)
    searched = plan_search(trace, traffic, replicas, slo, settings, prices,
                           per_window=settings.per_window)  # fmt: skip
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
    if searched.sized:
        static = {(r["load_scale"], r["prefix_caching"]): r["gpus"] if r["met"] else None
                  for r in rows}  # fmt: skip
        with_gpu_hours(rows, gpu_hours(searched.sized, static))
    answers = pa.Table.from_pylist(rows, schema=PLAN_SLO_ANSWERS_SCHEMA)
    disagg = None
    if settings.disagg_link is not None:
        resources.give_back_heap()
        disagg = disagg_answers(trace, traffic, replicas, rows, slo, settings, prices, searched)
    return SloPlan(searched, slow, fleets, answers, windows_table(searched.sized), disagg)


def disagg_answers(
    trace: Trace,
    traffic: Traffic,
    replicas: Sequence[Replica],
    rows: list[dict],
    slo: Slo,
    settings: PlanSloSettings,
    prices: Prices,
    searched: Searched,
) -> pa.Table:
    """At each load scale, caching on: the fewest GPUs of the colocated answer's deployment
    split into prefill and decode pools, routed as the colocated answer is (where none met,
    the first deployment under ``kv-aware``), its tiers on the prefill pool, on the busiest
    window (``disagg_plan.py``)."""
    span = Span.of(trace, traffic, searched.busiest)
    by_name = {r.deployment: r for r in replicas}
    out = []
    for scale in settings.load_scales:
        row = next(r for r in rows if r["load_scale"] == scale and r["prefix_caching"])
        met = bool(row["met"])
        replica = by_name[row["deployment"]] if met else replicas[0]
        router = row["router"] if met else "kv-aware"
        link = link_for(settings.disagg_link or "rdma", replica.gpu_spec)
        colocated = row["replicas"] if met else None
        tiers = None
        if met:
            dram, store = row["dram_gib_per_replica"] or 0.0, row["store_gib"]
            tiers = tiers_for(replica, dram, store, trace.block_size)
        answer, tried, bound = search_disagg(
            span, replica, slo, router, settings.engine, link, scale, colocated, tiers
        )
        out.append(
            disagg_row(
                answer, tried, bound, replica=replica, slo=slo, router=router, link=link,
                load_scale=scale, window=searched.busiest,
                colocated_gpus=row["gpus"] if met else None, prices=prices,
                cost_model=replica.engine.cost.source, tiers=tiers,
            )
        )  # fmt: skip
    return disagg_table(out)


def plan_search(
    trace,
    traffic,
    replicas: Sequence[Replica],
    slo: Slo,
    settings: PlanSloSettings,
    prices,
    cachings: tuple[bool, ...] = (True, False),
    kinds: set[tuple] | None = None,
    per_window: bool = False,
) -> Searched:  # type: ignore[no-untyped-def]
    """Every load scale with caching on (every tier and store) and off (none: with no block
    repeating, a tier only adds cost), searched on the busiest window and held in every window
    (``held.py``), in rounds (``search.py``). ``cachings``: which of the two to search;
    ``kinds``: only the series of these (deployment, router, DRAM, store) (:func:`answer_kind`);
    ``per_window``: then each window searched alone too (``per_window.py``)."""
    groups = search_groups(replicas, settings, prices, trace.block_size, cachings, kinds)
    windows = split(trace, settings.window_s)
    start = busiest(windows)
    spans: dict[tuple[int, bool], tuple] = {}
    shared = Shared(trace, traffic, slo, settings.engine, windows, spans)
    local = settings.dask_address is None and settings.workers == 1
    shipped: dict[str, object] = {}
    pooled = resolve_engine(settings.engine).pooled

    def run_lookups(probe: Probe) -> int:  # a pool caching holds more per block (``held.py``)
        return POOL_RUN_LOOKUPS if pooled and probe.prefix_caching else RUN_LOOKUPS

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
        if settings.dask_address:
            return on_cluster(tasks)
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
            memory=[task_bytes(trace, windows, t, spans, pooled) for t in tasks],
        )

    def on_cluster(tasks: Sequence[Task]) -> list[list[Part]]:
        # each task carries its own span, scattered to one worker, never the trace: a week's
        # trace copied to every worker would not fit them; a few tasks' spans at a time, so
        # that what is cut here and held there stays bounded
        address = settings.dask_address
        assert address is not None
        client = client_for(address)
        step = 2 * width(dask_address=address)
        out: list[list[Part]] = []
        for lo in range(0, len(tasks), step):
            chunk = tasks[lo : lo + step]
            keys = [span_key(t) for t in chunk]
            sent = {k: client.scatter(span_of(t, k), hash=False)
                    for t, k in zip(chunk, keys, strict=True)}  # fmt: skip
            items = [(t, k, sent[k]) for t, k in zip(chunk, keys, strict=True)]
            out += fan_out(
                probe_carried, (slo, settings.engine, windows), items, dask_address=address,
                weights=[task_weight(trace, windows, t) for t in chunk],
            )  # fmt: skip
        return out

    def span_key(t: Task) -> tuple:
        if t.search:
            return (t.windows[0], t.probe.prefix_caching)
        return run_key(windows, t.windows, t.probe)

    def span_of(t: Task, key: tuple) -> tuple:
        if t.search:
            return spans[key]
        first, last = windows[t.windows[0]], windows[t.windows[-1]]
        return cut(trace, traffic, first.warm, last.end, t.probe.prefix_caching)

    def lookups(first: int, end: int) -> int:
        return int(trace.offsets[end] - trace.offsets[first])

    sized: list[Sized] = []
    try:
        with kept_nodes(), session():
            outcomes, held = hold(groups, slo, windows, start, run_tasks, lookups, run_lookups)
            if per_window:  # a window's spans are dropped once it is sized
                sized = size_each_window(groups, slo, windows, run_tasks, spans.clear)
    finally:
        if settings.dask_address:  # the cluster's workers outlive the stage
            on_every_worker(settings.dask_address, release_kept)
    return Searched(tuple(outcomes), tuple(held), windows, start, tuple(sized))


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


def probe_carried(shared: tuple, item: tuple) -> list[Part]:
    """One task on a Dask cluster (``plan_search``): ``item`` is the task, its span's key and
    the span, carried with it; ``shared`` the search's SLO, engine and windows."""
    slo, engine, windows = shared
    task, key, span = item
    return probe_task(Shared(None, None, slo, engine, windows, {key: span}), task)


def task_weight(trace, windows, task: Task) -> float:  # type: ignore[no-untyped-def]
    """A task's expected cost: its lookups × its replicas (a cache-aware router scores every
    replica's tree: some 30 times as long)."""
    p = task.probe
    first, end = windows[task.windows[0]].warm, windows[task.windows[-1]].end
    router = 30.0 if p.series.router == "cache-aware" else 1.0
    return float(trace.offsets[end] - trace.offsets[first]) * (1 + p.replicas / 8) * router


def task_bytes(trace, windows, task: Task, spans=None, pooled: bool = False) -> int:  # type: ignore[no-untyped-def]
    """What a task holds at most: its span (blocks, ids, hashes, parents and per-lookup tokens,
    about 28 bytes a lookup), each replica's lists over the span's distinct blocks (8 bytes per
    block, replica and list: the cache, the router's tree, a DRAM tier, and 8 per block for
    their masks; ``pooled``: 12 more per block and replica, a KV pool's counts) and some 250
    bytes a request of state and results. Distinct blocks are the span's own where it was cut
    already (``spans``), else every lookup counts as one. A pool with caching off keeps no
    counts per block, nor a list for its cache."""
    p = task.probe
    first, end = windows[task.windows[0]].warm, windows[task.windows[-1]].end
    lookups = int(trace.offsets[end] - trace.offsets[first])
    cut_already = (spans or {}).get((task.windows[0], p.prefix_caching)) if task.search else None
    distinct = cut_already[0].n_unique if cut_already is not None else lookups
    listed = p.prefix_caching or not pooled
    lists = listed + (p.series.router == "cache-aware") + (p.series.tiers.dram_blocks > 0)
    pool = 12 * distinct * p.replicas if pooled and p.prefix_caching else 0
    return 28 * lookups + 8 * distinct * lists * (1 + p.replicas) + pool + 250 * (end - first)

"""Stage ``simulate``: the warehouse's trace through every policy × capacity × isolation →
``hit_rates``, ``hit_rate_timeseries`` and, when asked, ``request_outcomes``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb

from prefixscope import warehouse
from prefixscope.analysis.fanout import fan_out
from prefixscope.analysis.policies import PolicyOptions
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.gaps import (
    DEFAULT_BOUNDS,
    GapBuckets,
    check_bounds,
    load_gap_buckets,
)
from prefixscope.analysis.simulation.grid import Replayed, measure_replayed, replay_scenarios
from prefixscope.analysis.simulation.replay import replay
from prefixscope.analysis.simulation.scenarios import Scenario, Settings, scenarios
from prefixscope.analysis.simulation.tables import Tables
from prefixscope.analysis.trace.coarsen import check_block_size, coarsen
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.trace.tail import tail
from prefixscope.analysis.trace.warm import (
    Warmed,
    WarmStart,
    cold,
    first_window,
    with_blocks,
)
from prefixscope.analysis.trace.windows import check_windows
from prefixscope.analysis.validate.events import engine_cache


@dataclass(frozen=True)
class SimulateSettings:
    """``measure``: what every scenario shares (windows, options, outcomes); ``outcomes_for``:
    write ``request_outcomes`` for this one scenario only (default: all, when
    ``measure.outcomes``); ``workers`` / ``dask_address``: where the scenarios run."""

    policies: tuple[str, ...] = ("lru",)
    capacities: Capacities = field(default_factory=Capacities)
    isolations: tuple[str, ...] = ("shared",)
    measure: Settings = field(default_factory=Settings)
    outcomes_for: Scenario | None = None
    workers: int | None = 1
    dask_address: str | None = None
    #: Block sizes to simulate besides the warehouse's own (whole multiples of it: the trace is
    #: coarsened, ``trace/coarsen.py``); None: the warehouse's alone.
    block_sizes: tuple[int, ...] | None = None
    #: Blocks as vLLM counts them (``trace/full_blocks.py``): a hash-id trace's partial last
    #: block never cached, a prompt's last token always computed. Off: the documented
    #: convention (docs/simulation.md), every block named is cached.
    vllm_blocks: bool = False
    #: Where ``misses_by_gap`` cuts the gaps before a request within its session (seconds).
    gap_bounds: tuple[float, ...] = DEFAULT_BOUNDS
    #: Where the caches start (``trace/warm.py``): empty, after the trace's first window, or
    #: as the captured KV events left the engine.
    warm_start: WarmStart = field(default_factory=WarmStart)

    def check(self) -> None:
        """Names first, before any work."""
        given = self.capacities.blocks or self.capacities.tokens or self.capacities.gib
        scenarios(self.policies, [1] if given else [], self.isolations)
        check_windows(self.measure.windows)
        check_bounds(self.gap_bounds)
        check_warm_start(self.warm_start, self.policies, self.isolations)
        if not self.warm_start.cold and set(self.block_sizes or ()) - {None}:
            raise ValueError(
                "a warm start replays the warehouse's own blocks: run --block-size apart"
            )


@dataclass(frozen=True)
class SimulateResult:
    run_id: str
    tables: Tables
    grid: tuple[Scenario, ...]


def simulate_policies(wh: str | Path, settings: SimulateSettings) -> SimulateResult:
    settings.check()
    with warehouse.StageRun(wh, "simulate", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            gaps = load_gap_buckets(con, trace, settings.gap_bounds)
            if settings.vllm_blocks:
                trace = full_blocks_only(trace)
            warmed = warm_of(con, settings.warm_start, trace.block_size)(trace)
        for size in settings.block_sizes or ():
            check_block_size(trace, size)  # before any replay, not after the first grid
        measure = replace(
            settings.measure,
            model=settings.capacities.model_name,
            kv_dtype=settings.capacities.kv_dtype if settings.capacities.gib else None,
            warm_start=warmed.start.label,
            warm_requests=warmed.n_warm,
        )
        blocks, gibs = settings.capacities.resolve(trace.block_size)
        grid = scenarios(settings.policies, blocks, settings.isolations, gibs)
        gaps = None if gaps is None else gaps.tail(warmed.dropped)
        tables = simulate_scenarios(warmed.trace, grid, measure, settings, gaps, warmed.n_warm)
        for size in sorted(set(settings.block_sizes or ()) - {trace.block_size}):
            # the same caches in tokens (or GiB), in blocks of the other size; its rows carry
            # their block size, and only hit_rates: the series and outcomes stay the log's own
            other = coarsen(trace, size)
            blocks, gibs = at_block_size(settings.capacities, trace.block_size, size)
            grid_other = scenarios(settings.policies, blocks, settings.isolations, gibs)
            plain = replace(measure, outcomes=False)
            tables.hit_rates += simulate_scenarios(other, grid_other, plain, settings).hit_rates
        hit_rates, timeseries, outcomes = tables.arrow()
        with stage_run.publishing() as con:
            warehouse.append(con, "hit_rates", hit_rates, stage_run.run_id)
            warehouse.append(con, "hit_rate_timeseries", timeseries, stage_run.run_id)
            warehouse.append(con, "request_outcomes", outcomes, stage_run.run_id)
            for rows in tables.misses_by_gap:
                warehouse.append(con, "misses_by_gap", rows, stage_run.run_id)
    return SimulateResult(stage_run.run_id, tables, tuple(grid))


def at_block_size(
    capacities: Capacities, own: int, size: int
) -> tuple[list[int], list[float | None]]:
    """Capacities in blocks of ``size``: those given in blocks hold as many tokens as at the
    warehouse's ``own`` size; tokens and GiB are the same memory, in the other blocks."""
    if capacities.blocks:
        tokens = [b * own for b in capacities.blocks]
        return Capacities(tokens=tokens).resolve(size)
    return capacities.resolve(size)


#: A replay's cost relative to LRU's, by policy (docs/simulation.md#speed): S-FIFO passes over
#: blocks in use, Belady keeps a heap; FIFO's ring costs what LRU's touch log does.
_TASK_WEIGHT = {"s3fifo": 8.0, "belady": 3.0, "lfu": 1.5}


def replay_bytes(trace: Trace) -> int:
    """What one replay holds at most: a policy's state, up to 20 bytes a distinct block
    (``s3fifo`` and ``belady`` 16, and whose tenant inserted it), a byte a lookup (whether its
    hit crossed tenants) and its result, 16 bytes a request."""
    return 20 * trace.n_unique + trace.n_lookups + 16 * trace.n_requests


def simulate_scenarios(
    trace: Trace,
    grid: Sequence[Scenario],
    measure: Settings,
    settings: SimulateSettings,
    gaps: GapBuckets | None = None,
    discard: int = 0,
) -> Tables:
    """Every scenario, where ``settings`` says; rows in scenario order. Two passes: the tasks
    replay the scenarios (each returns its per-request outcome and own warm-up), then this
    process measures them all from the run's one shared steady start, so the rows are the same
    wherever the replays ran. In this process the scenarios replay in one call, so options
    resolved against the trace (pins) are resolved once. ``discard``: the first requests of
    ``trace`` are a warm start (``trace/warm.py``), replayed and never measured; ``gaps`` are
    of the rest."""
    local = settings.dask_address is None and settings.workers == 1
    belady = any(s.policy == "belady" for s in grid)
    if belady and settings.dask_address is None:
        trace.next_use  # noqa: B018 -- here, so that forked workers share this one copy
    if local:
        replayed = replay_scenarios(trace, grid, measure, discard)
    else:
        replayed = fan_out(
            simulate_scenario,
            trace,
            [(s, measure, discard) for s in grid],
            workers=settings.workers,
            dask_address=settings.dask_address,
            weights=[_TASK_WEIGHT.get(s.policy, 1.0) for s in grid],
            memory=[replay_bytes(trace)] * len(grid),
        )
    trace.forget("next_use")  # only belady reads it; the later stages keep the room
    measured = tail(trace, discard)
    ceilings = None
    if discard:  # the unbounded cache warm too, so that every row's ceiling is comparable
        ceilings = {
            mode: hit_tokens(
                trace, replay(trace, "ceiling", None, PolicyOptions(), mode, measure.quota_file)
                .hit_blocks,
            )[discard:]
            for mode in dict.fromkeys(s.isolation for s in grid)
        }  # fmt: skip
    return measure_replayed(measured, replayed, measure, settings.outcomes_for, gaps, ceilings)


def simulate_scenario(trace: Trace, job: tuple[Scenario, Settings, int]) -> Replayed:
    """One scenario's first pass (a task of :func:`simulate_scenarios`)."""
    scenario, measure, discard = job
    return replay_scenarios(trace, [scenario], measure, discard)[0]


def check_warm_start(start: WarmStart, policies: Sequence[str], isolations: Sequence[str]) -> None:
    """A warm start from the engine's events fills one shared cache, in the order it stored
    them: it says nothing of tenants (``salted``, ``partitioned``) nor of idle times (``ttl``)."""
    start.check()
    if start.source != "events":
        return
    if set(isolations) - {"shared"}:
        raise ValueError("a warm start from the engine's events fills its one shared cache: "
                         "run --isolation shared")  # fmt: skip
    if "ttl" in policies:
        raise ValueError("ttl drops blocks by their idle time, which the events do not carry: "
                         "warm ttl from the trace's first window")  # fmt: skip


def warm_of(
    con: duckdb.DuckDBPyConnection, start: WarmStart, block_size: int
) -> Callable[[Trace], Warmed]:
    """How a trace of the warehouse starts warm for ``start``, the events read now (a stage
    may cut the trace before it warms it: the events' state is then at the cut's first
    arrival)."""
    if start.source == "first-window":
        return lambda trace: first_window(trace, start.seconds)
    if start.source == "events":
        from prefixscope.stages.validate_events import load_streams

        streams = load_streams(con, block_size)
        return lambda trace: with_blocks(trace, engine_cache(streams, trace.start_s))
    return cold

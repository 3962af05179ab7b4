"""Stage ``simulate``: the warehouse's trace through every policy × capacity × isolation →
``hit_rates``, ``hit_rate_timeseries`` and, when asked, ``request_outcomes``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from prefixscope import warehouse
from prefixscope.analysis.fanout import fan_out
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.gaps import (
    DEFAULT_BOUNDS,
    GapBuckets,
    check_bounds,
    load_gap_buckets,
)
from prefixscope.analysis.simulation.grid import Replayed, measure_replayed, replay_scenarios
from prefixscope.analysis.simulation.scenarios import Scenario, Settings, scenarios
from prefixscope.analysis.simulation.tables import Tables
from prefixscope.analysis.trace.coarsen import check_block_size, coarsen
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.windows import check_windows


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

    def check(self) -> None:
        """Names first, before any work."""
        given = self.capacities.blocks or self.capacities.tokens or self.capacities.gib
        scenarios(self.policies, [1] if given else [], self.isolations)
        check_windows(self.measure.windows)
        check_bounds(self.gap_bounds)


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
        for size in settings.block_sizes or ():
            check_block_size(trace, size)  # before any replay, not after the first grid
        measure = replace(
            settings.measure,
            model=settings.capacities.model_name,
            kv_dtype=settings.capacities.kv_dtype if settings.capacities.gib else None,
        )
        blocks, gibs = settings.capacities.resolve(trace.block_size)
        grid = scenarios(settings.policies, blocks, settings.isolations, gibs)
        tables = simulate_scenarios(trace, grid, measure, settings, gaps)
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
#: blocks in use, Belady keeps a heap.
_TASK_WEIGHT = {"s3fifo": 8.0, "belady": 3.0, "fifo": 1.5, "lfu": 1.5}


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
) -> Tables:
    """Every scenario, where ``settings`` says; rows in scenario order. Two passes: the tasks
    replay the scenarios (each returns its per-request outcome and own warm-up), then this
    process measures them all from the run's one shared steady start, so the rows are the same
    wherever the replays ran. In this process the scenarios replay in one call, so options
    resolved against the trace (pins) are resolved once."""
    local = settings.dask_address is None and settings.workers == 1
    belady = any(s.policy == "belady" for s in grid)
    if belady and settings.dask_address is None:
        trace.next_use  # noqa: B018 -- here, so that forked workers share this one copy
    if local:
        replayed = replay_scenarios(trace, grid, measure)
    else:
        replayed = fan_out(
            simulate_scenario,
            trace,
            [(s, measure) for s in grid],
            workers=settings.workers,
            dask_address=settings.dask_address,
            weights=[_TASK_WEIGHT.get(s.policy, 1.0) for s in grid],
            memory=[replay_bytes(trace)] * len(grid),
        )
    trace.forget("next_use")  # only belady reads it; the later stages keep the room
    return measure_replayed(trace, replayed, measure, settings.outcomes_for, gaps)


def simulate_scenario(trace: Trace, job: tuple[Scenario, Settings]) -> Replayed:
    """One scenario's first pass (a task of :func:`simulate_scenarios`)."""
    scenario, measure = job
    return replay_scenarios(trace, [scenario], measure)[0]

"""The ``fleet_report`` flow: ingest → simulate every policy × capacity → LRU curve →
structure → [replay] → savings → report.

The flow only sequences; each task opens the warehouse for its own step and closes it, so a
task can retry or move to another worker without shared state. Simulation tasks are pure
(trace in, rows out) and fan out one per scenario; one task writes all their rows under a
single recorded run.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
from prefect import flow, get_run_logger, task, unmapped
from prefect.cache_policies import NO_CACHE

from prefixscope import warehouse
from prefixscope.analysis.mrc import CurveSettings, run_curve
from prefixscope.analysis.savings import DEFAULT_GPU, DEFAULT_MODEL, run_savings
from prefixscope.analysis.simulate import (
    Scenario,
    Settings,
    Tables,
    scenarios,
    simulate_grid,
    write_tables,
)
from prefixscope.analysis.structure import StructureSettings, run_structure
from prefixscope.analysis.trace import Trace, load_trace
from prefixscope.dashboards import build_report
from prefixscope.dashboards.savings import format_savings
from prefixscope.dashboards.text import format_hit_rates
from prefixscope.ingest import IngestOptions, IngestResult, ingest_files
from prefixscope.warehouse import FLEET

#: Log-spaced from 1,000 blocks (0.5 M tokens at 512) to 128,000 (the bundled trace's
#: working set is 182,790 blocks, so the curve reaches the ceiling's neighbourhood).
DEFAULT_CAPACITIES = (1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000)
DEFAULT_POLICIES = ("ceiling", "lru", "fifo", "s3fifo", "belady")
DEFAULT_WINDOWS = ("all", "last-half", "steady")


@dataclass(frozen=True)
class FleetReportOutcome:
    warehouse: str
    report: str
    lines: int
    accepted: int
    rejected: int
    table: str  # the fleet's hit rates as a short text table
    savings: str = ""  # prefill GPU-seconds and TTFT with and without the cache, per tenant


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Input paths, with glob patterns expanded (sorted) when the run starts: a scheduled run
    picks up the logs that landed since the last. A pattern that matches nothing is an error,
    as a missing file is."""
    paths: list[str] = []
    for item in inputs:
        if glob.has_magic(item):
            matched = sorted(glob.glob(item))
            if not matched:
                raise FileNotFoundError(f"no input file matches {item!r}")
            paths += matched
        else:
            paths.append(item)
    return paths


@task(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def ingest(
    inputs: Sequence[str], warehouse_path: str, format_name: str, options: IngestOptions
) -> IngestResult:
    params = {"inputs": list(inputs), "format": format_name, "options": options}
    with (
        warehouse.connect(warehouse_path) as con,
        warehouse.recorded_run(con, "ingest", params) as run_id,
    ):
        result = ingest_files(con, inputs, format_name, options, run_id)
    get_run_logger().info(
        "ingested %d lines: %d accepted, %d rejected",
        result.lines,
        result.accepted,
        result.rejected,
    )
    return result


@task(cache_policy=NO_CACHE)
def load(warehouse_path: str) -> Trace:
    with warehouse.connect(warehouse_path, read_only=True) as con:
        return load_trace(con)


@task(cache_policy=NO_CACHE)
def simulate(trace: Trace, scenario: Scenario, settings: Settings) -> Tables:
    return simulate_grid(trace, [scenario], settings)


@task(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def store(warehouse_path: str, parts: Sequence[Tables], parameters: dict[str, object]) -> str:
    merged = Tables()
    for part in parts:
        merged.extend(part)
    with (
        warehouse.connect(warehouse_path) as con,
        warehouse.recorded_run(con, "simulate", parameters) as run_id,
    ):
        write_tables(con, merged, run_id)
    return run_id


@task(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def mrc(warehouse_path: str, settings: CurveSettings) -> int:
    """The exact LRU curve for the fleet and every tenant: one pass, its own recorded run."""
    with warehouse.connect(warehouse_path) as con:
        return run_curve(con, settings).num_rows


def structure(warehouse_path: str, settings: StructureSettings) -> str:
    """Turns, shared prefixes, hit sources, first new blocks and reuse times, as one run."""
    with warehouse.connect(warehouse_path) as con:
        run_id, _ = run_structure(con, settings)
    return run_id


def structure_settings(capacities_blocks: Sequence[int]) -> StructureSettings:
    """The structure stage simulates the middle capacity of the flow's grid."""
    caps = sorted(capacities_blocks)
    return StructureSettings(capacity_blocks=caps[len(caps) // 2] if caps else None)


@task(cache_policy=NO_CACHE)
def replay(warehouse_path: str, scenario: Scenario, samples: int) -> tuple[str, str] | None:
    """Calibrate a prefill cost model on this machine (CPU, or CUDA when present); returns the
    (model, gpu) it was calibrated for, or None when torch is not installed."""
    try:
        import torch

        from prefixscope.gpu_replay.replay import ReplayOptions, run_replay
    except ImportError:
        get_run_logger().warning("replay skipped: torch is not installed (prefixscope[replay])")
        return None
    options = ReplayOptions(
        device="cuda" if torch.cuda.is_available() else "cpu",
        samples=samples,
        policy=scenario.policy,
        capacity_blocks=scenario.capacity_blocks,
        isolation=scenario.isolation,
    )
    with warehouse.connect(warehouse_path) as con:
        result = run_replay(con, options)
    return str(result.samples["model"][0]), result.gpu.name


@task(cache_policy=NO_CACHE, retries=1, retry_delay_seconds=2)
def savings(warehouse_path: str, scenario: Scenario, model: str, gpu: str) -> str:
    """Price the scenario's request outcomes: a calibrated cost model if the warehouse holds
    one for (model, gpu), else the roofline. Needs no torch."""
    with warehouse.connect(warehouse_path) as con:
        table = run_savings(
            con,
            model,
            gpu,
            policy=scenario.policy,
            capacity_blocks=scenario.capacity_blocks,
            isolation=scenario.isolation,
        )
    return format_savings(table)


def outcomes_scenario(grid: Sequence[Scenario], policy: str, capacity: int | None) -> Scenario:
    """The scenario whose per-request outcomes are priced: ``policy`` at ``capacity`` (default:
    the middle capacity), else the first bounded scenario of the grid."""
    bounded = [s for s in grid if s.policy == policy and s.capacity_blocks is not None]
    if capacity is not None:
        bounded = [s for s in bounded if s.capacity_blocks == capacity]
    if bounded:
        return bounded[len(bounded) // 2]
    return next((s for s in grid if s.capacity_blocks is not None), grid[0])


@task(cache_policy=NO_CACHE)
def report(warehouse_path: str, report_path: str) -> str:
    with (
        warehouse.connect(warehouse_path) as con,
        warehouse.recorded_run(con, "report", {"out": report_path}),
    ):
        return str(build_report(con, report_path, Path(warehouse_path).name))


@flow(name="fleet_report", log_prints=True)
def fleet_report(
    inputs: list[str],
    warehouse_path: str,
    report_path: str,
    format_name: str = "mooncake",
    tenant: str = "default",
    policies: list[str] | None = None,
    capacities_blocks: list[int] | None = None,
    windows: list[str] | None = None,
    savings_policy: str = "lru",
    savings_capacity_blocks: int | None = None,
    savings_model: str = DEFAULT_MODEL,
    savings_gpu: str = DEFAULT_GPU,
    replay_samples: int = 0,
) -> FleetReportOutcome:
    policies = policies or list(DEFAULT_POLICIES)
    capacities_blocks = capacities_blocks or list(DEFAULT_CAPACITIES)
    windows = windows or list(DEFAULT_WINDOWS)
    grid = scenarios(policies, capacities_blocks)  # fail on a bad policy before any work

    ingested = ingest(
        expand_inputs(inputs), warehouse_path, format_name, IngestOptions(tenant=tenant)
    )
    trace = load(warehouse_path)
    settings = Settings(windows=tuple(windows))
    priced = outcomes_scenario(grid, savings_policy, savings_capacity_blocks)
    tables = simulate.map(
        trace=unmapped(trace),
        scenario=grid,
        settings=[replace(settings, outcomes=s == priced) for s in grid],
    )
    store(
        warehouse_path,
        tables.result(),
        {"policies": policies, "capacity_blocks": capacities_blocks, "windows": windows},
    )
    curve = CurveSettings(policy="lru", windows=("all",), capacities=tuple(capacities_blocks))
    mrc(warehouse_path, curve)
    structure(warehouse_path, structure_settings(capacities_blocks))
    calibrated = replay(warehouse_path, priced, replay_samples) if replay_samples > 0 else None
    model, gpu = calibrated or (savings_model, savings_gpu)
    saved = savings(warehouse_path, priced, model, gpu)
    page = report(warehouse_path, report_path)
    rows = [row for part in tables.result() for row in part.hit_rates if row["tenant"] == FLEET]
    fleet = pa.Table.from_pylist(rows)
    return FleetReportOutcome(
        warehouse=warehouse_path,
        report=page,
        lines=ingested.lines,
        accepted=ingested.accepted,
        rejected=ingested.rejected,
        table=format_hit_rates(fleet),
        savings=saved,
    )

"""Stage ``fleet``: the warehouse's trace through every router × replica count × capacity ×
load scale (``analysis/fleet/settings.py``) → ``fleet_hit_rates``, ``fleet_replicas`` and
``miss_budget`` (``analysis/fleet/grid.py`` runs the grid)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import wants_calibration
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.grid import simulate_settings
from prefixscope.analysis.fleet.hardware import check_pools_fit
from prefixscope.analysis.fleet.run import FleetOutcome
from prefixscope.analysis.fleet.settings import FleetSettings, capacity_runs, priced_gpus
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.trace.load import block_size_of, load_trace
from prefixscope.stages.outcomes import calibrated
from prefixscope.stages.simulate import warm_of

__all__ = ["FleetResult", "FleetSettings", "load_traffic", "simulate_fleets"]


@dataclass(frozen=True)
class FleetResult:
    run_id: str
    hit_rates: pa.Table
    replicas: pa.Table
    budget: pa.Table
    outcomes: tuple[FleetOutcome, ...]


def simulate_fleets(wh: str | Path, settings: FleetSettings) -> FleetResult:
    settings.check()
    _precheck_pools(wh, settings)
    with warehouse.StageRun(wh, "fleet", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            traffic = load_traffic(con)
            # a calibrated model is one GPU's (a replay times one device): it prices TP 1 only
            fitted = {
                (g, tp): calibrated(con, settings.shape, g)
                for g, tp in dict.fromkeys(priced_gpus(settings))
                if wants_calibration(settings.cost_model, tp)
            }
            warm = warm_of(con, settings.warm_start, trace.block_size)
        hit_rates, replicas, budget, outcomes = simulate_settings(
            trace, traffic, settings, fitted, warm
        )
        with stage_run.publishing() as con:
            warehouse.append(con, "fleet_hit_rates", hit_rates, stage_run.run_id)
            warehouse.append(con, "fleet_replicas", replicas, stage_run.run_id)
            if budget.num_rows:
                warehouse.append(con, "miss_budget", budget, stage_run.run_id)
    return FleetResult(stage_run.run_id, hit_rates, replicas, budget, tuple(outcomes))


def _precheck_pools(wh: str | Path, settings: FleetSettings) -> None:
    """A pool engine's what-if capacity beyond its deployment is refused before the run
    starts, so nothing is written: it needs only the trace's block size."""
    given = settings.capacities
    pooled = any(resolve_engine(e).pooled for e in settings.engines)
    if not (pooled and settings.deployments and (given.blocks or given.tokens or given.gib)):
        return
    with warehouse.reading(wh) as con:
        block_size = block_size_of(con)
    runs = capacity_runs(settings, block_size)
    check_pools_fit([(f, h) for b, g, h in runs for f in settings.grid([b], [g])])

"""Stage ``plan-slo``: the cheapest fleet of deployments that meets a latency SLO in every
window of the trace, per load scale, with prefix caching on and off → ``plan_slo_fleets`` and
``plan_slo_answers``, and with ``per_window`` each window sized alone → ``plan_slo_windows``
(``analysis/plan/slo_plan.py`` runs it, ``analysis/plan/search.py`` says how the space is
searched, ``analysis/plan/held.py`` how the windows are, ``per_window.py`` each alone)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import wants_calibration
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.plan.search import Outcome
from prefixscope.analysis.plan.slo_plan import Searched, plan_slo
from prefixscope.analysis.plan.slo_settings import PlanSloSettings
from prefixscope.analysis.trace.load import load_trace
from prefixscope.stages.outcomes import calibrated

__all__ = ["PlanSloResult", "PlanSloSettings", "plan_for_slo"]


@dataclass(frozen=True)
class PlanSloResult:
    run_id: str
    outcomes: tuple[Outcome, ...]
    fleets: pa.Table
    answers: pa.Table
    searched: Searched | None = None
    slower: Searched | None = None  # the range's search (measured steps only)
    windows: pa.Table | None = None  # each window sized alone (``per_window``), else empty
    disagg: pa.Table | None = None  # the disaggregated answers (``disagg_link``), else None


def plan_for_slo(wh: str | Path, settings: PlanSloSettings) -> PlanSloResult:
    slo = settings.check()
    prices = settings.price_table
    shape = settings.shape
    with warehouse.StageRun(wh, "plan-slo", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            traffic = load_traffic(con)
            fitted = {
                text: calibrated(con, shape, d.gpu)
                for text, d in settings.parsed.items()
                if wants_calibration(settings.cost_model, d.tp)
            }
        plan = plan_slo(trace, traffic, settings, fitted, prices, slo)
        with stage_run.publishing() as con:
            warehouse.append(con, "plan_slo_fleets", plan.fleets, stage_run.run_id)
            warehouse.append(con, "plan_slo_answers", plan.answers, stage_run.run_id)
            if plan.windows.num_rows:
                warehouse.append(con, "plan_slo_windows", plan.windows, stage_run.run_id)
            if plan.disagg is not None:
                warehouse.append(con, "plan_slo_disagg", plan.disagg, stage_run.run_id)
    return PlanSloResult(stage_run.run_id, plan.searched.outcomes, plan.fleets, plan.answers,
                         plan.searched, plan.slower, plan.windows, plan.disagg)  # fmt: skip

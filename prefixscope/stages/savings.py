"""Stage ``savings``: one configuration's ``request_outcomes`` priced with a prefill cost model
→ ``savings`` (prefill GPU-seconds and TTFT with and without the cache, per tenant)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.savings import DEFAULT_GPU, DEFAULT_MODEL, cost_model, savings_table
from prefixscope.stages.outcomes import calibrated, choose_configuration, load_outcomes


@dataclass(frozen=True)
class SavingsSettings:
    """The model and GPU that price a miss, the cost model (auto: calibrated when the
    warehouse holds one, else the roofline), and which configuration's outcomes (default: the
    only one of the newest run)."""

    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    cost_model: str = "auto"
    outcomes_run: str | None = None
    policy: str | None = None
    capacity_blocks: int | None = None
    isolation: str | None = None
    #: A config.json whose shape ``model`` names (``resolve_model``).
    model_config: str | None = None


def run(wh: str | Path, settings: SavingsSettings) -> pa.Table:
    s = settings
    with warehouse.StageRun(wh, "savings", s) as run:
        with run.reading() as con:
            config = choose_configuration(
                con, s.outcomes_run, s.policy, s.capacity_blocks, s.isolation
            )
            fitted = (
                None
                if s.cost_model == "roofline"
                else calibrated(con, resolve_model(s.model, s.model_config), s.gpu)
            )
            outcomes, traffic = load_outcomes(con, config)
        cost = cost_model(s.model, s.gpu, s.cost_model, fitted, s.model_config)
        table = savings_table(config, outcomes, traffic, cost)
        with run.publishing() as con:
            warehouse.append(con, "savings", table, run.run_id)
    return table

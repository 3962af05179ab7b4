"""Stage ``replay``: sampled requests of one configuration timed as miss and hit in torch →
``replay_samples`` and a fitted cost model in ``miss_cost_models``. Needs torch
(``prefixscope[replay]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefixscope import warehouse
from prefixscope.stages.outcomes import choose_configuration, outcome_rows


def calibrate_by_replay(wh: str | Path, settings: Any) -> Any:
    """``settings``: a ``gpu_replay.replay.ReplayOptions``; returns its ``ReplayResult`` and
    the run id."""
    try:
        from prefixscope.gpu_replay.replay import replay_requests
    except ImportError as exc:
        raise ValueError(
            f"replay needs torch ({exc}) — install it: pip install 'prefixscope[replay]'"
        ) from None
    o = settings
    with warehouse.StageRun(wh, "replay", o) as stage_run:
        with stage_run.reading() as con:
            config = choose_configuration(
                con, o.outcomes_run, o.policy, o.capacity_blocks, o.isolation
            )
            rows = outcome_rows(con, config)
        result = replay_requests(rows, config.run_id, o)
        with stage_run.publishing() as con:
            warehouse.append(con, "replay_samples", result.samples, stage_run.run_id)
            warehouse.append(con, "miss_cost_models", result.cost_model_row, stage_run.run_id)
    return stage_run.run_id, result

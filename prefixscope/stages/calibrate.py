"""Stage ``calibrate``: a cost model measured on some GPU, from the file the benchmark wrote →
``miss_cost_models``, where every later ``savings``, ``fleet`` and ``plan`` of that model and
GPU finds it (``analysis/cost/calibration.py`` reads and checks the file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefixscope import warehouse
from prefixscope.analysis.cost import calibration


@dataclass(frozen=True)
class CalibrateSettings:
    """``source``: a benchmark or GPU-check JSON file; ``gpu``: store its models under this GPU
    name instead of the one the file gives (a GPU the spec table does not know)."""

    source: str
    gpu: str | None = None


def calibrate_cost_models(
    wh: str | Path, settings: CalibrateSettings
) -> tuple[str, list[calibration.Calibration]]:
    """The run id and the models loaded; the file is read and checked before the run starts."""
    found = calibration.read(settings.source, settings.gpu)
    with warehouse.StageRun(wh, "calibrate", settings) as stage_run, stage_run.publishing() as con:
        warehouse.append(con, "miss_cost_models", calibration.table(found), stage_run.run_id)
    return stage_run.run_id, found

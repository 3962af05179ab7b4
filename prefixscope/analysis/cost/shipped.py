"""Cost models shipped with prefixscope: what prices (model, GPU) when the warehouse holds no
calibrated one.

A shipped model is a file the GPU benchmark wrote on that GPU, copied unchanged into
``prefixscope/data/cost_models/`` (its provenance inside: device, driver, torch, date), read
with the same checks as ``prefixscope calibrate`` (``calibration.py``). Rows it prices say
``cost_model = 'shipped:FILE'`` (the file's name without ``.json``), so a figure always says
which measurement it rests on. A file is shipped only after a real run on that GPU; none is
made up, so the folder may hold none.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from prefixscope.analysis.cost.calibration import Calibration, read

#: The folder read; tests point it elsewhere.
DIRECTORY: Path = Path(str(files("prefixscope") / "data" / "cost_models"))
PREFIX = "shipped:"


@dataclass(frozen=True)
class Shipped:
    source: str  # 'shipped:FILE'
    calibration: Calibration


def find(model: str, gpu: str, directory: Path | None = None) -> Shipped | None:
    """The shipped model of (catalog model name, GPU key); of several files, the last by name."""
    folder = DIRECTORY if directory is None else directory
    if not folder.is_dir():
        return None
    for path in sorted(folder.glob("*.json"), reverse=True):
        for c in read(path):
            if (c.model, c.gpu) == (model, gpu):
                return Shipped(PREFIX + path.stem, c)
    return None


def kind_of(source: str | None) -> tuple[str, str | None]:
    """``(cost_model, cost_model_run_id)`` of a fitted model's source: a replay or calibrate
    run id gives ``('calibrated', run_id)``, a shipped file ``('shipped:FILE', None)``."""
    if source is not None and source.startswith(PREFIX):
        return source, None
    return "calibrated", source

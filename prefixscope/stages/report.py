"""Stage ``report``: the warehouse's views → one self-contained page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefixscope import warehouse
from prefixscope.dashboards import build_report


@dataclass(frozen=True)
class ReportSettings:
    out: str = "report.html"


def run(wh: str | Path, settings: ReportSettings) -> Path:
    """Reads the views from a read-only connection; the run is closed after the page is
    written."""
    with warehouse.StageRun(wh, "report", settings) as run, run.reading() as con:
        return build_report(con, settings.out, Path(wh).name)

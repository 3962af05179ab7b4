"""Stage ``report``: the warehouse's views → one self-contained page."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from prefixscope import warehouse
from prefixscope.dashboards import build_report
from prefixscope.export.atomic import check_regular


@dataclass(frozen=True)
class ReportSettings:
    out: str = "report.html"


def write_report(wh: str | Path, settings: ReportSettings) -> Path:
    """Reads the views from a read-only connection; the run is closed after the page is
    written. The page is written beside ``out`` and renamed onto it when whole, so a failure
    (a full disk) leaves no half page, and an earlier page at ``out`` as it was."""
    out = Path(settings.out)
    check_regular(out)  # a link, a device or a pipe is never replaced by the page
    partial = out.with_name(f".{out.name}.partial")  # same folder: the rename is atomic
    with warehouse.StageRun(wh, "report", settings) as stage_run, stage_run.reading() as con:
        try:
            build_report(con, partial, Path(wh).name)
            os.replace(partial, out)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            if exc.filename is not None or exc.errno is None:
                raise
            # a failed write names no file (a full disk): name the page
            raise OSError(exc.errno, exc.strerror, str(out)) from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return out

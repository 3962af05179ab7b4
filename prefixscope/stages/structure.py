"""Stage ``structure``: turns, session statistics, shared prefixes, hit sources, first new
blocks and reuse times → six tables under one run (docs/structure.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.structure.log import load_log
from prefixscope.analysis.structure.tables import TABLES, StructureSettings, analyse
from prefixscope.analysis.trace.load import load_trace


@dataclass(frozen=True)
class StructureResult:
    run_id: str
    tables: dict[str, pa.Table]


def run(wh: str | Path, settings: StructureSettings) -> StructureResult:
    with warehouse.stage_run(wh, "structure", settings) as (con, run_id):
        trace = load_trace(con)
        tables = analyse(trace, load_log(con, trace), settings)
        for name in TABLES:
            warehouse.append(con, name, tables[name], run_id)
    return StructureResult(run_id, tables)

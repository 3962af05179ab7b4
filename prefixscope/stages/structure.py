"""Stage ``structure``: turns, session statistics, shared prefixes, hit sources, first new
blocks, reuse times and agent sessions → seven tables under one run (docs/structure.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.structure import agents as agent_tables
from prefixscope.analysis.structure.log import load_log
from prefixscope.analysis.structure.tables import TABLES, StructureSettings, analyse
from prefixscope.analysis.trace.load import load_trace


@dataclass(frozen=True)
class StructureResult:
    run_id: str
    tables: dict[str, pa.Table]


def find_structure(wh: str | Path, settings: StructureSettings) -> StructureResult:
    with warehouse.StageRun(wh, "structure", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            log = load_log(con, trace)
            agents = agent_tables.load_agent_requests(con)
        tables = analyse(trace, log, settings)
        tables[agent_tables.TABLE] = agent_tables.agent_sessions(agents, settings.loop_gap_s)
        with stage_run.publishing() as con:
            for name in (*TABLES, agent_tables.TABLE):
                warehouse.append(con, name, tables[name], stage_run.run_id)
    return StructureResult(stage_run.run_id, tables)

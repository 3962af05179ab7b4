"""Every Arrow schema a stage appends with is its SQL table's: the same columns (after the
``run_id`` that ``warehouse.append`` adds), each of the SQL type its Arrow type maps to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from prefixscope import warehouse
from prefixscope.analysis.cost.savings import SAVINGS_SCHEMA
from prefixscope.analysis.curves.curve import MRC_SCHEMA
from prefixscope.analysis.fleet.budget import MISS_BUDGET_SCHEMA
from prefixscope.analysis.fleet.disagg_table import DISAGG_FLEETS_SCHEMA
from prefixscope.analysis.fleet.tables import FLEET_HIT_RATES_SCHEMA, FLEET_REPLICAS_SCHEMA
from prefixscope.analysis.plan.disagg_plan import PLAN_SLO_DISAGG_SCHEMA
from prefixscope.analysis.plan.plan import PLAN_SCHEMA
from prefixscope.analysis.simulation.gaps import MISSES_BY_GAP_SCHEMA
from prefixscope.analysis.simulation.tables import (
    HIT_RATES_SCHEMA,
    OUTCOMES_SCHEMA,
    TIMESERIES_SCHEMA,
)
from prefixscope.analysis.structure import turns
from prefixscope.analysis.structure.log import RequestLog
from prefixscope.analysis.structure.schemas import AGENT_SESSIONS_SCHEMA
from prefixscope.analysis.structure.tables import (
    FIRST_NEW_SCHEMA,
    HIT_SOURCES_SCHEMA,
    REUSE_SCHEMA,
    SESSION_STATS_SCHEMA,
    SHARED_PREFIXES_SCHEMA,
    TABLES,
    StructureSettings,
    analyse,
)
from prefixscope.analysis.trace.csr import build_trace

#: How DuckDB's DESCRIBE names the type each Arrow type is stored as.
SCALARS = {
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.uint64(): "UBIGINT",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP WITH TIME ZONE",
}


def sql_type(arrow: pa.DataType) -> str:
    if pa.types.is_list(arrow):
        return f"{sql_type(arrow.value_type)}[]"
    assert arrow in SCALARS, f"no SQL type known for Arrow {arrow}"
    return SCALARS[arrow]


def test_the_type_map_reads_lists_of_lists() -> None:
    assert sql_type(pa.list_(pa.string())) == "VARCHAR[]"
    assert sql_type(pa.list_(pa.list_(pa.uint64()))) == "UBIGINT[][]"


def structure_schemas() -> dict[str, pa.Schema]:
    """The schemas of the six structure tables as ``analyse`` produces them: two tenants'
    conversations over a shared prompt, with the log's chat ids, simulated at a capacity, so
    that every table has rows and every column a value somewhere."""
    requests = [[1, 2, 3], [1, 2, 3, 4], [1, 2, 5], [1, 2, 5, 6], [7, 8], [1, 2, 3, 4, 9]]
    n = len(requests)
    trace = build_trace(
        requests,
        [4 * len(r) - 1 for r in requests],
        ["a", "a", "b", "b", "a", "a"],
        4,
        times=np.arange(n) * 30.0,
    )
    log = RequestLog(
        turns.LogIds(
            chat_id=np.arange(100, 100 + n, dtype=np.int64),
            parent_chat_id=np.array([-1, 100, -1, 102, -1, 101], np.int64),
            turn=np.array([1, 2, 1, 2, 1, 3], np.int32),
            session=np.full(n, -1, np.int64),
        ),
        (),
        np.array(["chat", "chat", "chat", "chat", "chat", "chat"], dtype=object),
    )
    tables = analyse(trace, log, StructureSettings(capacity_blocks=4, simulate_top=2))
    assert set(tables) == set(TABLES)
    return {name: table.schema for name, table in tables.items()}


def cost_model_schema() -> pa.Schema:
    pytest.importorskip("torch")
    from prefixscope.gpu_replay.replay import COST_MODEL_SCHEMA

    return COST_MODEL_SCHEMA


# (SQL table, where its Arrow schema comes from, SQL columns beyond run_id + the schema's)
CASES: list[tuple[str, Callable[[], pa.Schema], set[str]]] = [
    ("hit_rates", lambda: HIT_RATES_SCHEMA, set()),
    ("hit_rate_timeseries", lambda: TIMESERIES_SCHEMA, set()),
    ("request_outcomes", lambda: OUTCOMES_SCHEMA, set()),
    ("mrc", lambda: MRC_SCHEMA, set()),
    ("savings", lambda: SAVINGS_SCHEMA, set()),
    ("fleet_hit_rates", lambda: FLEET_HIT_RATES_SCHEMA, set()),
    ("fleet_replicas", lambda: FLEET_REPLICAS_SCHEMA, set()),
    ("plan", lambda: PLAN_SCHEMA, set()),
    ("miss_cost_models", cost_model_schema, set()),
    *((name, lambda name=name: structure_schemas()[name], set()) for name in TABLES),
    ("agent_sessions", lambda: AGENT_SESSIONS_SCHEMA, set()),
    ("misses_by_gap", lambda: MISSES_BY_GAP_SCHEMA, set()),
    ("miss_budget", lambda: MISS_BUDGET_SCHEMA, set()),
    ("disagg_fleets", lambda: DISAGG_FLEETS_SCHEMA, set()),
    ("plan_slo_disagg", lambda: PLAN_SLO_DISAGG_SCHEMA, set()),
]


def test_the_named_structure_schemas_are_what_analyse_produces() -> None:
    produced = structure_schemas()
    assert produced["shared_prefixes"] == SHARED_PREFIXES_SCHEMA
    assert produced["first_new_blocks"] == FIRST_NEW_SCHEMA
    assert produced["reuse_times"] == REUSE_SCHEMA
    assert produced["session_stats"] == SESSION_STATS_SCHEMA
    assert produced["hit_sources"] == HIT_SOURCES_SCHEMA


@pytest.fixture(scope="module")
def described(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    """(column, type) of every table of a fresh warehouse, in table order."""
    path: Path = tmp_path_factory.mktemp("schemas") / "wh.duckdb"
    with warehouse.connect(path) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        return {t: [(r[0], r[1]) for r in con.execute(f"DESCRIBE {t}").fetchall()] for t in tables}


@pytest.mark.parametrize(("table", "schema_of", "extra"), CASES, ids=[c[0] for c in CASES])
def test_a_schema_is_its_sql_table(described, table, schema_of, extra) -> None:  # type: ignore[no-untyped-def]
    schema = schema_of()
    columns = dict(described[table])
    # The columns, in the table's order: run_id first, then the schema's.
    assert [c for c in columns if c not in extra] == ["run_id", *schema.names]
    assert set(columns) - {"run_id", *schema.names} == extra
    assert columns["run_id"] == "VARCHAR"
    assert {f.name: sql_type(f.type) for f in schema} == {f.name: columns[f.name] for f in schema}

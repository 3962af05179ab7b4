"""The DuckDB warehouse: one file that every stage reads from and writes to.

Every command that writes opens a :func:`recorded_run`, so each written row can be traced back
to the command, parameters and package version that produced it (the ``runs`` table).
"""

from __future__ import annotations

import json
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from prefixscope import __version__, sql


def connect(path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the warehouse at ``path`` with every table in place.

    Timestamps are shown in UTC whatever the machine's time zone, so figures and page agree.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise FileNotFoundError(f"no warehouse at {path}: run `prefixscope ingest` first")
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path), read_only=read_only)
    con.execute("SET TimeZone = 'UTC'")
    if not read_only:
        apply_schema(con)
    return con


def apply_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table that is missing, then (re)create every view: tables are data and
    are never replaced; views are code and always match this version's ``.sql`` files."""
    for name in sql.schema_files():
        con.execute(sql.load(name))
    for name in sql.view_files():
        # views/00_fresh_runs -> fresh_runs: a leading NN_ only orders the files
        view = name.rsplit("/", 1)[-1].lstrip("0123456789").removeprefix("_")
        con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql.load(name)}")


def append(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table, run_id: str) -> int:
    """Append ``rows`` to ``table`` under ``run_id``, columns matched by name; returns the
    number of rows. The one way a stage writes its results."""
    if rows.num_rows == 0:
        return 0
    con.register("new_rows", rows)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT ? AS run_id, * FROM new_rows", [run_id])
    finally:
        con.unregister("new_rows")
    return rows.num_rows


def new_run_id() -> str:
    """A run id that sorts by time: UTC timestamp then random suffix."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@contextmanager
def recorded_run(
    con: duckdb.DuckDBPyConnection, command: str, parameters: dict[str, Any]
) -> Iterator[str]:
    """Record ``command`` in ``runs`` around the block and yield its run id.

    The row is committed as 'running' first, so a crash leaves a visible trace; it is closed as
    'succeeded', or as 'failed' with the error, and the exception propagates.
    """
    run_id = new_run_id()
    con.execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?, now(), NULL, 'running', NULL)",
        [run_id, command, json.dumps(parameters, default=str, sort_keys=True), __version__],
    )
    try:
        yield run_id
    except BaseException as exc:
        error = "".join(traceback.format_exception_only(exc)).strip()[:2000]
        con.execute(
            "UPDATE runs SET finished_at = now(), status = 'failed', error = ? WHERE run_id = ?",
            [error, run_id],
        )
        raise
    con.execute(
        "UPDATE runs SET finished_at = now(), status = 'succeeded' WHERE run_id = ?", [run_id]
    )


def parameters_of(settings: object) -> dict[str, Any]:
    """A stage's settings as the ``runs.parameters`` it is recorded with."""
    if is_dataclass(settings) and not isinstance(settings, type):
        return asdict(settings)
    return dict(settings)  # type: ignore[call-overload]


@contextmanager
def stage_run(
    path: str | Path, command: str, settings: object
) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
    """Open the warehouse at ``path`` and record ``command`` with ``settings`` around the block;
    yields the connection and the run id, and closes the connection after."""
    con = connect(path)
    try:
        with recorded_run(con, command, parameters_of(settings)) as run_id:
            yield con, run_id
    finally:
        con.close()


@contextmanager
def reading(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse at ``path``, opened to read; closed after the block."""
    con = connect(path)
    try:
        yield con
    finally:
        con.close()

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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from prefixscope import __version__, sql

#: The ``tenant`` value of rows that cover the whole fleet (all tenants together).
FLEET = "*"


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
        for name in sql.schema_files():
            con.execute(sql.load(name))
    return con


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

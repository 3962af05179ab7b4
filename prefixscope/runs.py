"""The ``runs`` table: every command that writes records itself there, so each written row can
be traced back to the command, parameters and package version that produced it."""

from __future__ import annotations

import contextvars
import errno
import json
import os
import socket
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from prefixscope import __version__
from prefixscope.storage_errors import root_cause

ABANDONED = "abandoned: the process that ran it ended before it finished"
#: Where a run records the step of a flow it ran as (``pipelines/resume.py``).
FLOW_STEP = "flow_step"
_FLOW_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar(FLOW_STEP, default=None)


@contextmanager
def flow_step(name: str) -> Iterator[None]:
    """Runs started in the block record ``name`` (``KEY:N``) in their parameters."""
    token = _FLOW_STEP.set(name)
    try:
        yield
    finally:
        _FLOW_STEP.reset(token)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (one this user may not signal does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError) as exc:
        return getattr(exc, "errno", None) != errno.ESRCH
    return True


def mark_abandoned(con: duckdb.DuckDBPyConnection) -> int:
    """Close as 'abandoned' every 'running' run whose process has ended: on this host, a pid
    that is no longer alive; elsewhere (or unrecorded), one started more than a day ago."""
    host = socket.gethostname()
    rows = con.execute(
        "SELECT run_id, pid, host, started_at < now() - INTERVAL 1 DAY FROM runs "
        "WHERE status = 'running'"
    ).fetchall()
    gone = [
        run_id
        for run_id, pid, run_host, old in rows
        if (run_host == host and pid is not None and not process_alive(int(pid)))
        or ((run_host != host or pid is None) and old)
    ]
    for run_id in gone:
        con.execute(
            "UPDATE runs SET finished_at = now(), status = 'abandoned', error = ? "
            "WHERE run_id = ? AND status = 'running'",
            [ABANDONED, run_id],
        )
    return len(gone)


def new_run_id() -> str:
    """A run id that sorts by time: UTC timestamp then random suffix."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def _error_text(exc: BaseException) -> str:
    """What ``runs.error`` keeps: the error that names the cause, not a rollback's complaint
    raised while handling it."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "".join(traceback.format_exception_only(root_cause(exc))).strip()[:2000]


def start_run(
    con: duckdb.DuckDBPyConnection,
    command: str,
    parameters: dict[str, Any],
    run_id: str | None = None,
    started_at: float | None = None,
) -> str:
    """Insert ``command``'s 'running' row (with this process's pid and host) under ``run_id``
    (default: a new one); its run id. ``started_at``: when the run began (epoch seconds), where
    its row goes in later (default: now)."""
    run_id = run_id or new_run_id()
    con.execute(
        "INSERT INTO runs (run_id, command, parameters, version, started_at, finished_at, "
        "status, error, pid, host) "
        "VALUES (?, ?, ?, ?, coalesce(to_timestamp(?), now()), NULL, 'running', NULL, ?, ?)",
        [
            run_id,
            command,
            json.dumps(parameters, default=str, sort_keys=True),
            __version__,
            started_at,
            os.getpid(),
            socket.gethostname(),
        ],
    )
    return run_id


def finish_run(con: duckdb.DuckDBPyConnection, run_id: str, exc: BaseException | None) -> None:
    """Close the run as 'succeeded', or as 'failed' with ``exc``."""
    if exc is None:
        con.execute(
            "UPDATE runs SET finished_at = now(), status = 'succeeded' WHERE run_id = ?", [run_id]
        )
    else:
        con.execute(
            "UPDATE runs SET finished_at = now(), status = 'failed', error = ? WHERE run_id = ?",
            [_error_text(exc), run_id],
        )


@contextmanager
def recorded_run(
    con: duckdb.DuckDBPyConnection, command: str, parameters: dict[str, Any]
) -> Iterator[str]:
    """Record ``command`` in ``runs`` around the block on an open connection; yields its run id.

    The row is committed as 'running' first, so a crash leaves a visible trace; it is closed as
    'succeeded', or as 'failed' with the error, and the exception propagates.
    """
    run_id = start_run(con, command, parameters)
    try:
        yield run_id
    except BaseException as exc:
        finish_run(con, run_id, exc)
        raise
    finish_run(con, run_id, None)


def parameters_of(settings: object) -> dict[str, Any]:
    """A stage's settings as the ``runs.parameters`` it is recorded with, and the flow's step
    it runs as, if any (:func:`flow_step`)."""
    if is_dataclass(settings) and not isinstance(settings, type):
        out = asdict(settings)
    else:
        out = dict(settings)  # type: ignore[call-overload]
    step = _FLOW_STEP.get()
    if step is not None:
        out[FLOW_STEP] = step
    return out

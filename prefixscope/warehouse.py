"""The DuckDB warehouse: one file that every stage reads from and writes to.

Every command that writes records itself in the ``runs`` table (:class:`StageRun`, or
:func:`recorded_run` on an open connection), so each written row can be traced back to the
command, parameters and package version that produced it.

Readers are not locked out for long: a stage records its run in one tiny transaction, loads its
inputs from a read-only connection (DuckDB lets many processes read at once), computes with the
file closed, then opens it to write only to publish its rows and close its run in one short
transaction (docs/operations.md). Opening meets another process's lock now and then; every open
here waits for it, up to :data:`LOCK_TIMEOUT_S` seconds, then fails with one line.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
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

#: How long an open waits for another process's lock before it fails (``--lock-timeout``).
LOCK_TIMEOUT_S = 60.0
#: The one notice printed (to stderr, once per process) when an open has to wait.
WAIT_NOTICE = "prefixscope: waiting for the warehouse: another process is writing it"
_noticed = False

ABANDONED = "abandoned: the process that ran it ended before it finished"


class WarehouseError(ValueError):
    """A warehouse the command cannot use (a directory, not DuckDB, foreign, locked, missing);
    its message says what is wrong and what to do."""


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "Could not set lock" in str(exc)


def _open(path: Path, read_only: bool, lock_timeout: float | None) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``, waiting with backoff while another process holds the file's lock."""
    global _noticed
    timeout = LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            if read_only and "different configuration" in str(exc):
                # This process holds it open to write: read through the same database.
                return duckdb.connect(str(path))
            if not _locked(exc):
                raise _open_error(path, exc) from None
            if time.monotonic() >= deadline:
                raise WarehouseError(
                    f"the warehouse {path} is in use by another process (waited {timeout:g} s) — "
                    "try again when it finishes, or wait longer with --lock-timeout SECONDS"
                ) from None
        if not _noticed:
            _noticed = True
            print(WAIT_NOTICE, file=sys.stderr, flush=True)
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
        delay = min(delay * 2, 0.25)


def _header(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(16)
    except OSError:
        return b""


def _open_error(path: Path, exc: duckdb.Error) -> Exception:
    text = str(exc)
    if "not a valid DuckDB database file" in text or "sqlite" in text.lower():
        return WarehouseError(
            f"{path} is not a DuckDB file — give --warehouse a new path or a prefixscope warehouse"
        )
    if "Permission denied" in text:
        return WarehouseError(
            f"cannot open the warehouse {path}: permission denied — "
            "give --warehouse a file you may write, or fix its permissions"
        )
    if "No space left" in text:
        return WarehouseError(
            f"no space left on the device of the warehouse {path} — free some space or give "
            "--warehouse a path on another disk"
        )
    return WarehouseError(f"cannot open the warehouse {path}: {_one_line(text)} — check the file")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def connect(
    path: str | Path,
    *,
    read_only: bool = False,
    create: bool = True,
    lock_timeout: float | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse at ``path``: read-only, or to write with every table and view in place
    (creating the file only when ``create``), and marks runs whose process has ended
    ``abandoned``. Waits up to ``lock_timeout`` (default :data:`LOCK_TIMEOUT_S`) for another
    process's lock. A file this cannot use (a directory, not DuckDB, another application's
    DuckDB file) is a :class:`WarehouseError` and is left as it was.

    Timestamps are shown in UTC whatever the machine's time zone, so figures and page agree.
    """
    path = Path(path)
    if path.is_dir():
        raise WarehouseError(
            f"{path} is a directory, not a warehouse — give --warehouse a file, e.g. "
            f"{path / 'prefixscope.duckdb'}"
        )
    if not path.exists() and (read_only or not create):
        raise WarehouseError(
            f"no warehouse at {path} — run `prefixscope ingest --warehouse {path}` first"
        )
    if not read_only and not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WarehouseError(
                f"cannot create the folder of the warehouse {path}: {exc.strerror} — "
                "give --warehouse a path you may write"
            ) from None
    existed = path.exists()
    if existed and _header(path).startswith(b"SQLite format 3"):
        # Caught here: DuckDB would first try to fetch its SQLite extension, a slow failure
        # on a machine without network.
        raise WarehouseError(
            f"{path} is not a DuckDB file (it is SQLite) — give --warehouse a new path or a "
            "prefixscope warehouse"
        )
    con = _open(path, read_only, lock_timeout)
    try:
        con.execute("SET TimeZone = 'UTC'")
        # Progress is the command's to report: DuckDB's own bar would break its one-line output.
        con.execute("SET enable_progress_bar = false")
        if not read_only:
            if existed:
                _check_ours(con, path)
            apply_schema(con)
            mark_abandoned(con)
    except BaseException:
        con.close()
        raise
    return con


def _check_ours(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse to write into another application's DuckDB file: one with tables but no ``runs``."""
    tables = {
        t
        for (t,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        ).fetchall()
    }
    if tables and "runs" not in tables:
        raise WarehouseError(
            f"{path} is a DuckDB file of something else (tables {', '.join(sorted(tables)[:5])}) "
            "— give --warehouse a new path or a prefixscope warehouse"
        )


def apply_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table that is missing, then (re)create every view: tables are data and
    are never replaced; views are code and always match this version's ``.sql`` files."""
    for name in sql.schema_files():
        con.execute(sql.load(name))
    for name in sql.view_files():
        # views/00_fresh_runs -> fresh_runs: a leading NN_ only orders the files
        view = name.rsplit("/", 1)[-1].lstrip("0123456789").removeprefix("_")
        con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{sql.load(name)}")


def _alive(pid: int) -> bool:
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
        if (run_host == host and pid is not None and not _alive(int(pid)))
        or ((run_host != host or pid is None) and old)
    ]
    for run_id in gone:
        con.execute(
            "UPDATE runs SET finished_at = now(), status = 'abandoned', error = ? "
            "WHERE run_id = ? AND status = 'running'",
            [ABANDONED, run_id],
        )
    return len(gone)


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


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "".join(traceback.format_exception_only(exc)).strip()[:2000]


def start_run(con: duckdb.DuckDBPyConnection, command: str, parameters: dict[str, Any]) -> str:
    """Insert ``command``'s 'running' row (with this process's pid and host); its run id."""
    run_id = new_run_id()
    con.execute(
        "INSERT INTO runs (run_id, command, parameters, version, started_at, finished_at, "
        "status, error, pid, host) VALUES (?, ?, ?, ?, now(), NULL, 'running', NULL, ?, ?)",
        [
            run_id,
            command,
            json.dumps(parameters, default=str, sort_keys=True),
            __version__,
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
    """A stage's settings as the ``runs.parameters`` it is recorded with."""
    if is_dataclass(settings) and not isinstance(settings, type):
        return asdict(settings)
    return dict(settings)  # type: ignore[call-overload]


class StageRun:
    """One stage's run, in the pattern that keeps readers out for the least time::

        with StageRun(path, "simulate", settings) as run:   # 'running' row, tiny transaction
            with run.reading() as con:                      # read-only: load the inputs
                trace = load_trace(con)
            tables = compute(trace)                         # the file is closed meanwhile
            with run.publishing() as con:                   # one short transaction
                warehouse.append(con, "hit_rates", tables, run.run_id)

    Publishing appends and closes the run as 'succeeded' in one transaction, so a reader sees
    all of a run's rows or none. An error anywhere closes it as 'failed' (in a new short
    transaction) and propagates; a process killed meanwhile leaves it 'running' until the next
    open to write marks it 'abandoned'. ``create``: whether the warehouse may be created (only
    ingest); every other stage needs an existing one.
    """

    def __init__(
        self, path: str | Path, command: str, settings: object, *, create: bool = False
    ) -> None:
        self.path = Path(path)
        self.command = command
        self.parameters = parameters_of(settings)
        self.create = create
        self.run_id = ""
        self._published = False

    def __enter__(self) -> StageRun:
        con = connect(self.path, create=self.create)
        try:
            self.run_id = start_run(con, self.command, self.parameters)
        finally:
            con.close()
        return self

    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The warehouse opened read-only; closed after the block."""
        con = connect(self.path, read_only=True)
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def writing(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The warehouse opened to write, outside any transaction (for a stage that manages its
        own, like ingest); the run is closed 'succeeded' on it after the block."""
        con = connect(self.path)
        try:
            yield con
            finish_run(con, self.run_id, None)
            self._published = True
        finally:
            con.close()

    @contextmanager
    def publishing(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The warehouse opened to write inside one transaction; the run is closed 'succeeded'
        in it, and it commits after the block (or rolls back on an error)."""
        con = connect(self.path)
        try:
            con.begin()
            try:
                yield con
                finish_run(con, self.run_id, None)
            except BaseException:
                con.rollback()
                raise
            con.commit()
            self._published = True
        finally:
            con.close()

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if exc is None and not self._published:
            with self.publishing():
                pass
        elif exc is not None and not self._published:
            try:
                con = connect(self.path, lock_timeout=min(LOCK_TIMEOUT_S, 10.0))
            except Exception:
                return  # left 'running': the next open to write marks it 'abandoned'
            try:
                finish_run(con, self.run_id, exc)
            finally:
                con.close()


@contextmanager
def reading(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse at ``path``, opened read-only; closed after the block."""
    con = connect(path, read_only=True)
    try:
        yield con
    finally:
        con.close()

"""The DuckDB warehouse: one file that every stage reads from and writes to.

Every command that writes records itself in the ``runs`` table (:class:`StageRun`, or
:func:`recorded_run` on an open connection; ``prefixscope/runs.py``), so each written row can be
traced back to the command, parameters and package version that produced it.

Readers are not locked out for long: a stage records its run in one tiny transaction, loads its
inputs from a read-only connection (DuckDB lets many processes read at once), computes with the
file closed, then opens it to write only to publish its rows and close its run in one short
transaction (docs/operations.md). Opening meets another process's lock now and then; every open
here waits for it, up to :data:`LOCK_TIMEOUT_S` seconds, then fails with one line.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb
import pyarrow as pa

from prefixscope import resources

# The runs table's functions, used here and re-exported: ``warehouse.start_run`` and the rest.
from prefixscope.runs import ABANDONED as ABANDONED
from prefixscope.runs import finish_run as finish_run
from prefixscope.runs import mark_abandoned as mark_abandoned
from prefixscope.runs import new_run_id as new_run_id
from prefixscope.runs import parameters_of as parameters_of
from prefixscope.runs import recorded_run as recorded_run
from prefixscope.runs import start_run as start_run
from prefixscope.schema import apply_schema
from prefixscope.storage_errors import StorageCause, storage_cause

#: How long an open waits for another process's lock before it fails (``--lock-timeout``).
LOCK_TIMEOUT_S = 60.0
#: The storage format a new warehouse is written in: DuckDB 1.4's, the long-term release, so
#: the DuckDB command line a user installs (1.5 reads formats 64 to 68) opens it; the Python
#: driver (2.0) would write its own newest format (69) by default, which that command line
#: refuses. An existing file keeps the format it was written in. (docs/warehouse.md)
STORAGE_VERSION = "v1.4.0"
_CONFIG = {"storage_compatibility_version": STORAGE_VERSION}
#: The one notice printed (to stderr, once per process) when an open has to wait.
WAIT_NOTICE = "prefixscope: waiting for the warehouse: another process is writing it"
_noticed = False


class WarehouseError(ValueError):
    """A warehouse the command cannot use (a directory, not DuckDB, foreign, locked, missing);
    its message says what is wrong and what to do."""


def _join(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to the database this process already holds open at ``path``, in whichever
    configuration it was opened: ours to write, or the driver's defaults."""
    for kwargs in ({"config": _CONFIG}, {"read_only": read_only}):
        try:
            return duckdb.connect(str(path), **kwargs)
        except duckdb.Error as exc:
            if "different configuration" not in str(exc):
                raise
    return duckdb.connect(str(path))


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.IOException) and "Could not set lock" in str(exc)


def _open(
    path: Path, read_only: bool, lock_timeout: float | None, *, fresh: bool = False
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``, waiting with backoff while another process holds the file's lock.
    ``fresh``: the file did not exist, so what a failed create left of it is removed."""
    global _noticed
    timeout = LOCK_TIMEOUT_S if lock_timeout is None else lock_timeout
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=_CONFIG)
        except duckdb.Error as exc:
            if "different configuration" in str(exc):
                # This process holds it open already (to write, or opened it without these
                # settings): go through that same database.
                return _join(path, read_only)
            if not _locked(exc):
                if fresh:
                    _remove_unfinished(path)
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
    cause = storage_cause(exc)
    if cause is not None:
        return WarehouseError(storage_message(path, cause))
    return WarehouseError(f"cannot open the warehouse {path}: {_one_line(text)} — check the file")


def storage_message(path: Path, cause: StorageCause) -> str:
    """The one line for a warehouse that a disk problem keeps from being written."""
    if cause.kind == "full":
        return (
            f"no space left on the device of the warehouse {path} — free some space, or give "
            "--warehouse a path on another disk"
        )
    if cause.kind == "read-only":
        return (
            f"cannot write the warehouse {path}: its file system is read-only — remount it "
            "read-write, or give --warehouse a path on a writable disk"
        )
    return (
        f"cannot write the warehouse {path}"
        + (f" ({cause.file})" if cause.file and cause.file != str(path) else "")
        + ": permission denied — give --warehouse a file you may write, or fix its permissions"
    )


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
    if existed and not path.is_file():  # a FIFO, a device: reading it could block or destroy
        raise WarehouseError(
            f"{path} is not a regular file — give --warehouse a new path or a prefixscope "
            "warehouse"
        )
    header = _header(path) if existed else b""
    if header.startswith(b"SQLite format 3"):
        # Caught here: DuckDB would first try to fetch its SQLite extension, a slow failure
        # on a machine without network.
        raise WarehouseError(
            f"{path} is not a DuckDB file (it is SQLite) — give --warehouse a new path or a "
            "prefixscope warehouse"
        )
    if header and header[8:12] != b"DUCK":
        # DuckDB itself would open a CSV, JSON or Parquet file as an empty database of views
        # over it, so an ingest would report its rows and keep none
        raise WarehouseError(
            f"{path} is not a DuckDB file — give --warehouse a new path or a prefixscope "
            "warehouse"
        )
    con = _open(path, read_only, lock_timeout, fresh=not existed)
    try:
        _refuse_in_memory(con, path)
        con.execute("SET TimeZone = 'UTC'")
        # Progress is the command's to report: DuckDB's own bar would break its one-line output.
        con.execute("SET enable_progress_bar = false")
        if not read_only:
            if existed:
                _check_ours(con, path)
            with transaction(con):
                apply_schema(con)
                mark_abandoned(con)
    except BaseException:
        con.close()
        if not existed:
            _remove_unfinished(path)
        else:
            tidy(path)
        raise
    return con


def _refuse_in_memory(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """An empty file named like data (``.csv``, ``.parquet``): DuckDB opens it in memory."""
    q = "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    if con.execute(q).fetchone()[0] is None:  # type: ignore[index]
        raise WarehouseError(
            f"{path} is named like a data file, and DuckDB opens such a name as a database in "
            "memory (nothing would be kept) — give --warehouse a path ending in .duckdb"
        )


def tidy(path: Path) -> None:
    """Let DuckDB remove the empty WAL that a commit which could not write (a full disk) leaves
    beside the file: an open to write and a close do it, under DuckDB's own lock, so a WAL
    another process is using is never touched (its lock makes the open fail, and nothing is
    done). A WAL that holds anything is the database's and is kept."""
    wal = path.with_name(path.name + ".wal")
    try:
        if wal.stat().st_size:
            return
    except OSError:
        return
    with suppress(duckdb.Error):
        duckdb.connect(str(path), config=_CONFIG).close()


#: DuckDB's file starts with three 4 KiB headers, and every table lives in blocks after them:
#: a file no longer holds no table, only what a failed create (a full disk) wrote.
_HEADER_BYTES = 3 * 4096


def _remove_unfinished(path: Path) -> None:
    """Remove what a create that failed left at ``path`` (a file of headers alone, a WAL of
    no more), so the next command finds no warehouse rather than an empty or broken one."""
    for leftover in (path, path.with_name(path.name + ".wal")):
        try:
            if leftover.stat().st_size <= _HEADER_BYTES and leftover.is_file():
                leftover.unlink()
        except OSError:
            pass


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction around the block: committed after it, rolled back on an error. The
    error that ended the block is the one that propagates: a failed write (a full disk) has
    often ended the transaction already, and the rollback's own complaint (``no transaction
    is active``) would hide the cause."""
    con.begin()
    try:
        yield
        con.commit()
    except BaseException:
        with suppress(duckdb.Error):
            con.rollback()
        raise


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


class StageRun:
    """One stage's run, in the pattern that keeps readers out for the least time::

        with StageRun(path, "simulate", settings) as stage_run:  # 'running' row, tiny write
            with stage_run.reading() as con:       # read-only: load the inputs
                trace = load_trace(con)
            tables = compute(trace)                # the file is closed meanwhile
            with stage_run.publishing() as con:    # one short transaction
                warehouse.append(con, "hit_rates", tables, stage_run.run_id)

    Publishing appends and closes the run as 'succeeded' in one transaction, so a reader sees
    all of a run's rows or none. An error anywhere closes it as 'failed' (in a new short
    transaction) and propagates; a process killed meanwhile, or a disk too full to take even
    the 'failed', leaves it 'running' until the next open to write marks it 'abandoned'.
    Whatever recording the failure meets, the error that propagates is the stage's own.

    ``create``: whether the warehouse may be created (only ingest); every other stage needs an
    existing one. A warehouse is created by the run's first write, not by its start: a run
    that fails before it (a missing input, a file that does not parse) creates no file, and
    its 'running' row goes in with that first write.
    """

    def __init__(
        self, path: str | Path, command: str, settings: object, *, create: bool = False
    ) -> None:
        self.path = Path(path)
        self.command = command
        self.parameters = parameters_of(settings)
        self.create = create
        self.run_id = ""
        self._started = 0.0  # epoch seconds: a run recorded later still began at its start
        self._recorded = False
        self._published = False

    def __enter__(self) -> StageRun:
        self._stage = resources.enter(self.command)
        try:
            return self._start()
        except BaseException:
            resources.leave(self._stage)
            raise

    def _start(self) -> StageRun:
        self.run_id, self._started = new_run_id(), time.time()
        if self.create and not self.path.exists():
            check_creatable(self.path)
            return self  # recorded by the first write, which creates the file
        con = connect(self.path, create=self.create)
        try:
            start_run(con, self.command, self.parameters, self.run_id)
            self._recorded = True
        finally:
            con.close()
            if not self._recorded:
                tidy(self.path)
        return self

    def _open_to_write(self) -> duckdb.DuckDBPyConnection:
        con = connect(self.path, create=self.create)
        if not self._recorded:
            try:
                start_run(con, self.command, self.parameters, self.run_id, self._started)
            except BaseException:
                con.close()
                tidy(self.path)
                raise
            self._recorded = True
        return con

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
        con = self._open_to_write()
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
        con = self._open_to_write()
        try:
            with transaction(con):
                yield con
                finish_run(con, self.run_id, None)
            self._published = True
        finally:
            con.close()

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if exc is None and not self._published:
                with self.publishing():
                    pass
            elif exc is not None and self._recorded and not self._published:
                self._record_failure(exc)
        finally:
            resources.leave(self._stage)

    def _record_failure(self, exc: BaseException) -> None:
        """Close the run as 'failed' with ``exc``, if the warehouse lets it: never raises, so
        that ``exc`` (the cause) is what propagates. Opening to write again also lets DuckDB
        tidy what the failure left (an empty WAL) when it closes."""
        try:
            con = connect(self.path, lock_timeout=min(LOCK_TIMEOUT_S, 10.0))
        except Exception:
            return  # left 'running': the next open to write marks it 'abandoned'
        try:
            finish_run(con, self.run_id, exc)
        except Exception:
            pass  # the same: a full disk cannot take even this row
        finally:
            con.close()


def check_creatable(path: Path) -> None:
    """Refuse, before any work, a new warehouse whose folder cannot be made or written: the
    nearest folder that exists must be a folder this process may write."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise WarehouseError(
            f"cannot create the warehouse {path}: {folder} is not a folder you may write — "
            "give --warehouse a path you may write"
        )


@contextmanager
def reading(path: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse at ``path``, opened read-only; closed after the block."""
    con = connect(path, read_only=True)
    try:
        yield con
    finally:
        con.close()

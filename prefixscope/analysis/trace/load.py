"""The warehouse's requests as a :class:`~.csr.Trace`: the one place that knows the replay
order and the warehouse's block size."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.bounded import bounded

#: Formats whose block ids come with the trace (a partial last block is hashed and can hit).
#: Every other format is a token source, which follows vLLM's rule that the last prompt token
#: is always computed (``Trace.recomputes_last_block``).
HASH_ID_FORMATS = ("mooncake", "bailian")

#: Replay order: arrival time, ties broken by input order (file, then line).
REPLAY_ORDER = "arrival_ts, source.file, source.line"


def block_size_of(con: duckdb.DuckDBPyConnection) -> int:
    """The warehouse's one block size. A cache has one, so a warehouse that mixes them must be
    split before it is simulated."""
    sizes = [r[0] for r in con.execute("SELECT DISTINCT block_size FROM requests").fetchall()]
    if not sizes:
        raise ValueError("the warehouse holds no requests — run `prefixscope ingest` first")
    if len(sizes) > 1:
        raise ValueError(
            f"the warehouse mixes block sizes {sorted(sizes)}, and a cache has one — ingest each "
            "block size into a warehouse of its own"
        )
    return int(sizes[0])


def replay_relation(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
    """Every request in replay order: id, tenant, input tokens, block hashes, arrival (``t``,
    epoch seconds), whether the last prompt token is always computed (a token source), and its
    session (``tenant ␟ session_id``; NULL where the log names none)."""
    by_format = f"format NOT IN {HASH_ID_FORMATS!r}"
    # A row's own rule where it has one (Mooncake lines ingested with --full-blocks), else its
    # format's; a requests table from before the column was added (opened read-only, never
    # brought up to date) has only the format.
    rule = by_format
    if has_column(con, "last_token_rule"):
        rule = f"coalesce(last_token_rule, {by_format})"
    # a session is a (tenant, session id) pair: the same id in two tenants is two sessions
    session = (
        "CASE WHEN session_id IS NOT NULL THEN tenant || chr(31) || session_id END"
        if has_column(con, "session_id")
        else "NULL::VARCHAR"
    )
    return con.sql(
        "SELECT request_id, tenant, input_tokens, block_hashes, "
        "epoch_us(arrival_ts) / 1e6 AS t, "
        f"{rule} AS last_token_rule, {session} AS session "
        f"FROM requests ORDER BY {REPLAY_ORDER}"
    )


def has_column(con: duckdb.DuckDBPyConnection, column: str) -> bool:
    """Whether the requests table has ``column`` (a table from before it was added, opened
    read-only and never brought up to date, or a hand-built one, may not)."""
    [(found,)] = con.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'requests' "
        "AND column_name = ? AND database_name = current_database()",
        [column],
    ).fetchall()
    return bool(found)


def trace_from_table(table: pa.Table, block_size: int) -> Trace:
    """A trace from rows of :func:`replay_relation` (already in replay order); request ids only
    where the table has them."""
    ids = "request_id" in table.column_names
    rule = "last_token_rule" in table.column_names
    return build_trace(
        table.column("block_hashes"),
        table.column("input_tokens").to_numpy(),
        table.column("tenant").combine_chunks(),
        block_size,
        times=table.column("t").to_numpy(),
        request_ids=table.column("request_id").combine_chunks() if ids else None,
        last_token_rule=table.column("last_token_rule").to_numpy(zero_copy_only=False)
        if rule
        else None,
        sessions=table.column("session") if "session" in table.column_names else None,
    )


#: DuckDB's buffers while it sorts the requests for a load (``bounded``): the trace is built
#: beside them (at 250 M lookups DuckDB held 4.3 GB more unbounded).
LOAD_MEMORY = "3GB"


def _fetch_replay(con: duckdb.DuckDBPyConnection) -> pa.Table:
    with bounded(con, LOAD_MEMORY):
        return replay_relation(con).to_arrow_table()


#: Block hashes of at least this many bytes are kept in a file mapped into memory
#: (:func:`mapped`): 256 MiB, 32 M distinct blocks.
MAPPED_HASHES_BYTES = 256 * 2**20


def mapped(values: np.ndarray) -> np.ndarray:
    """``values``, read-only, from a file mapped into memory rather than in the process's own
    memory. A trace's block hashes (1.3 GB at 250 M lookups) are read by few analyses and by no
    replay: mapped, their pages are the kernel's page cache, which it drops under pressure and
    reads back when they are touched, and which forked workers share. The file is unlinked at
    once: its space is freed when the last mapping goes. Where no temporary file can be
    written (a full disk), they stay in memory."""
    try:
        fd, path = tempfile.mkstemp(prefix="prefixscope-hashes-", suffix=".bin")
    except OSError:
        return values
    try:
        with os.fdopen(fd, "wb") as f:
            values.tofile(f)
        return np.memmap(path, dtype=values.dtype, mode="r", shape=values.shape)
    except OSError:
        return values
    finally:
        os.unlink(path)


#: The last trace loaded in this process, by its warehouse's file and contents
#: (:func:`_stamp`): the flow's stages each load the trace, and each finds it here.
_LOADED: dict[tuple, Trace] = {}


def _stamp(con: duckdb.DuckDBPyConnection) -> tuple:
    """The warehouse file and what its requests are: every ingest run's row count. An ingest
    adds a run; a replacing ingest removes one run's rows and adds another's."""
    [(path,)] = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()
    if not path:
        return ()
    try:
        runs = con.execute(
            "SELECT ingest_run_id, count(*) FROM requests GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    except duckdb.BinderException:  # a hand-made requests table, without ingest runs
        return ()
    return (path, tuple(runs))


def stamp_of(con: duckdb.DuckDBPyConnection) -> tuple:
    """What the warehouse's requests are, as a key (empty: none can be told, e.g. an
    in-memory database): what a process may keep a result computed on them by."""
    return _stamp(con)


def load_trace(con: duckdb.DuckDBPyConnection) -> Trace:
    """Every request of the warehouse, in replay order, with the warehouse's one block size.
    Loaded once per process while the requests stay the same (a trace is immutable, so every
    stage may share it); an in-memory database is loaded every time."""
    stamp = _stamp(con)
    if stamp and stamp in _LOADED:
        return _LOADED[stamp]
    block_size = block_size_of(con)
    trace = trace_from_table(_fetch_replay(con), block_size)
    if trace.hashes.nbytes >= MAPPED_HASHES_BYTES:
        trace = replace(trace, hashes=mapped(trace.hashes))
    if stamp:
        _LOADED.clear()  # one trace at a time: the memory of one
        _LOADED[stamp] = trace
    return trace

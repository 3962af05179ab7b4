"""Write parsed lines into the warehouse: accepted ones to ``requests``, the rest to ``rejects``.

Two steps. :func:`stage_files` reads and parses every file of the command into private Arrow
files (hashes and counts, never text) and touches no warehouse. :func:`publish` then copies them
all into it in ONE transaction: all files or none. A file is the same file as an earlier source
when it has the same resolved path (a log that grew) or the same content (the SHA-256 of its
decompressed bytes, under any path); publishing deletes every such earlier source's rows first,
so re-ingesting replaces, never duplicates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats import IngestOptions
from prefixscope.ingest.hashkey import fingerprint_of, refuse_other_key
from prefixscope.ingest.staging import (
    SNIFF_LINES,
    FormatMismatch,
    Staged,
    StagedFile,
    check_inputs,
    judge_timestamps,
    pseudonymize,
    stage_files,
)

__all__ = [
    "SNIFF_LINES",
    "FileResult",
    "FormatMismatch",
    "IngestResult",
    "Staged",
    "StagedFile",
    "check_inputs",
    "ingest_files",
    "judge_timestamps",
    "pseudonymize",
    "publish",
    "stage_files",
]


@dataclass(frozen=True)
class FileResult:
    path: str
    file_id: str
    lines: int
    accepted: int
    rejected: int
    complete: bool
    replaced: bool  # the same content had been ingested before; its old rows were replaced
    out_of_order: int = 0  # accepted rows arriving before an earlier line's arrival (kept)
    reasons: tuple[tuple[str, int], ...] = ()  # reject reasons and their counts, most first


@dataclass(frozen=True)
class IngestResult:
    run_id: str
    files: tuple[FileResult, ...]
    skipped: tuple[str, ...] = ()  # inputs given again in the command (same path or content)

    @property
    def lines(self) -> int:
        return sum(f.lines for f in self.files)

    @property
    def accepted(self) -> int:
        return sum(f.accepted for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)


def ingest_files(
    con: duckdb.DuckDBPyConnection,
    paths: Sequence[str | Path],
    format_name: str,
    options: IngestOptions,
    run_id: str,
    *,
    replace: bool | None = None,
) -> IngestResult:
    """Ingest ``paths`` (plain or gzip, in this order) as ``format_name`` under ``run_id``: all
    of them, or (on any error) nothing. ``replace`` overrides ``options.replace``.

    Equivalent to :func:`stage_files` (reads and parses everything, touches no warehouse) then
    :func:`publish` (one short transaction on ``con``); a caller that wants the warehouse open
    only while publishing calls the two itself."""
    with stage_files(paths, format_name, options) as staged:
        return publish(con, staged, run_id, replace=replace)


def _refuse_mixed_block_sizes(
    con: duckdb.DuckDBPyConnection, staged: Staged, stages: list[pa.Table]
) -> None:
    """A cache has one block size, so a warehouse of two cannot be simulated (``trace/load``
    refuses it): refused here, before it is written, with what to do."""
    before = {int(b) for (b,) in con.execute("SELECT DISTINCT block_size FROM requests").fetchall()}
    new: dict[int, str] = {}
    for f, stage in zip(staged.files, stages, strict=True):
        # the full rows, held or memory-mapped, are in the stage's order: one per line read
        sizes = f.rows()["block_size"].filter(pc.is_null(stage["reason"]))
        for size in pc.unique(sizes.combine_chunks()).to_pylist():
            if size is not None:
                new.setdefault(int(size), f.path)
    if len(before | set(new)) <= 1:
        return
    if before:
        odd = min(set(new) - before)
        shown = ", ".join(str(b) for b in sorted(before))
        what = f"{new[odd]} holds requests of {odd}-token blocks, the warehouse's of {shown}"
    else:
        a, b = sorted(new)[:2]
        what = f"{new[a]} and {new[b]} hold requests of {a}- and {b}-token blocks"
    raise ValueError(
        f"{what} — a cache has one block size: ingest each into a warehouse of its own "
        "(no request was written)"
    )


def publish(
    con: duckdb.DuckDBPyConnection,
    staged: Staged,
    run_id: str,
    *,
    replace: bool | None = None,
) -> IngestResult:
    """Write every staged file in ONE transaction on ``con``: first delete every earlier source
    that matches a file by resolved path or by content (``file_id``) -- with its requests and
    rejects --, then insert the files' requests, rejects and sources. Raises ValueError and
    writes nothing when that would reject lines an earlier ingest accepted, unless ``replace``
    (default: ``staged.options.replace``)."""
    replace = staged.options.replace if replace is None else replace
    format_name = staged.format_name
    results: list[FileResult] = []
    con.begin()
    try:
        matched = [_matching_sources(con, f) for f in staged.files]
        gone = sorted({fid for m in matched for fid in m} | {f.file_id for f in staged.files})
        refuse_other_key(con, staged.options.hash_key, gone)
        con.register("gone", pa.table({"file_id": pa.array(gone, pa.string())}))
        command_ids: list[pa.Array] = []
        stages = []
        for f, m in zip(staged.files, matched, strict=True):
            earlier = pa.concat_arrays(command_ids) if command_ids else pa.array([], pa.string())
            stage = _reject_duplicates(con, f.stage, earlier)
            if not replace and m:
                _refuse_regression(con, f, stage, m)
            accepted_ids = stage.filter(
                pc.and_(pc.is_null(stage["reason"]), pc.is_valid(stage["log_request_id"]))
            )["log_request_id"]
            command_ids.append(accepted_ids.combine_chunks())
            stages.append(stage)
        for table in ("requests", "rejects", "sources"):
            con.execute(f"DELETE FROM {table} WHERE file_id IN (SELECT file_id FROM gone)")
        _refuse_mixed_block_sizes(con, staged, stages)
        for f, m, stage in zip(staged.files, matched, stages, strict=True):
            results.append(
                _insert(
                    con, f, stage, format_name, run_id, replaced=bool(m),
                    hash_key=fingerprint_of(staged.options.hash_key),
                )
            )  # fmt: skip
        _verify(con, results)
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        for view in ("gone", "dups", "ids", "command_ids", "new_rejects", "old", "ingest_stage"):
            with contextlib.suppress(duckdb.Error):
                con.unregister(view)
    return IngestResult(run_id, tuple(results), staged.skipped)


def _matching_sources(con: duckdb.DuckDBPyConnection, f: StagedFile) -> list[str]:
    """The file ids of earlier sources that are this file: the same content, or the same
    resolved path (a log that grew since)."""
    rows = con.execute(
        "SELECT file_id FROM sources WHERE file_id = ? OR coalesce(resolved_path, path) IN (?, ?)",
        [f.file_id, f.resolved, str(f.path)],
    ).fetchall()
    return sorted({r[0] for r in rows})


def _refuse_regression(
    con: duckdb.DuckDBPyConnection, f: StagedFile, stage: pa.Table, matched: list[str]
) -> None:
    """Stop when lines that an earlier ingest of this file accepted would now be rejected (a
    wrong --block-size, a chat template that fails): lines are compared by number, so a log
    that only grew at its end compares line for line."""
    rejected = stage.filter(pc.is_valid(stage["reason"])).select(["line", "reason"])
    if rejected.num_rows == 0:
        return
    con.register("new_rejects", rejected)
    con.register("old", pa.table({"file_id": pa.array(matched, pa.string())}))
    rows = con.execute(
        """
        SELECT n.reason, count(DISTINCT n.line) AS lines
        FROM requests r JOIN new_rejects n ON r.source.line = n.line
        WHERE r.file_id IN (SELECT file_id FROM old)
        GROUP BY n.reason ORDER BY lines DESC, n.reason
        """
    ).fetchall()
    if not rows:
        return
    total = sum(n for _, n in rows)
    raise ValueError(
        f"{f.path}: this ingest would reject {total:,} line(s) that an earlier ingest of the "
        f"same file accepted (most often: {rows[0][0]}); check --block-size and the format "
        "flags, or pass --replace to replace the earlier rows anyway. Nothing was written"
    )


def _insert(
    con: duckdb.DuckDBPyConnection,
    f: StagedFile,
    stage: pa.Table,
    format_name: str,
    run_id: str,
    *,
    replaced: bool,
    hash_key: str,
) -> FileResult:
    state = f.state
    rejected = stage.num_rows - stage["reason"].null_count
    accepted = stage.num_rows - rejected
    assert accepted + rejected == state.lines, (accepted, rejected, state.lines)
    out_of_order = _count_out_of_order(stage)
    reasons = pc.value_counts(pc.drop_null(stage["reason"])).to_pylist() if rejected else []
    reason_counts = tuple(
        sorted(((r["values"], r["counts"]) for r in reasons), key=lambda rc: (-rc[1], rc[0]))
    )
    params = {"file_id": f.file_id, "path": str(f.path), "format": format_name, "run_id": run_id}
    # The full rows come from the file's staging file; the lines publishing found to be
    # duplicates (the only reasons decided here) come as the small view `dups`.
    dups = stage.filter(pc.equal(pc.fill_null(stage["reason"], ""), "duplicate_request_id"))
    con.register("dups", dups.select(["line", "detail"]))
    con.register("ingest_stage", f.rows())
    con.execute(sql.load("ingest/swap_in_requests"), params)
    con.execute(sql.load("ingest/swap_in_rejects"), params)
    con.unregister("ingest_stage")
    con.unregister("dups")
    con.execute(
        """INSERT INTO sources (file_id, path, format, bytes, lines, accepted, rejected,
                                complete, out_of_order, ingest_run_id, ingested_at,
                                resolved_path, hash_key)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now(), ?, ?)""",
        [
            f.file_id,
            str(f.path),
            format_name,
            state.bytes_read,
            state.lines,
            accepted,
            rejected,
            state.truncated is None,
            out_of_order,
            run_id,
            f.resolved,
            hash_key,
        ],
    )
    return FileResult(
        str(f.path),
        f.file_id,
        state.lines,
        accepted,
        rejected,
        state.truncated is None,
        replaced,
        out_of_order,
        reason_counts,
    )


def _verify(con: duckdb.DuckDBPyConnection, results: list[FileResult]) -> None:
    """Inside the publish transaction: per file, the rows written add up to the lines read."""
    if not results:
        return
    ids = [r.file_id for r in results]
    written = dict(
        con.execute(
            """SELECT file_id, sum(n) FROM (
                   SELECT file_id, count(*) AS n FROM requests
                   WHERE file_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY file_id
                   UNION ALL
                   SELECT file_id, count(*) FROM rejects
                   WHERE file_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY file_id
               ) GROUP BY file_id""",
            [ids, ids],
        ).fetchall()
    )
    for r in results:
        got = int(written.get(r.file_id, 0))
        if got != r.lines:  # never expected: a line went missing or was doubled
            raise AssertionError(f"{r.path}: {r.lines} lines read, {got} rows written")


def _reject_duplicates(
    con: duckdb.DuckDBPyConnection, stage: pa.Table, earlier: pa.Array
) -> pa.Table:
    """Reject accepted rows whose request id was seen before (``duplicate_request_id.sql``):
    on an earlier line, in an earlier file of this command (``earlier``), or in the warehouse
    outside the sources this command replaces (view ``gone``). Only the narrow (line, id)
    columns go to DuckDB; most logs carry no id and skip this."""
    with_id = pc.and_(pc.is_null(stage["reason"]), pc.is_valid(stage["log_request_id"]))
    if not pc.any(with_id).as_py():
        return stage
    con.register("ids", stage.select(["line", "log_request_id"]).filter(with_id))
    con.register("command_ids", pa.table({"log_request_id": earlier.cast(pa.string())}))
    try:
        dup = con.sql(sql.load("ingest/duplicate_request_ids"))
        lines = dup.to_arrow_table()["line"]
    finally:
        con.unregister("ids")
        con.unregister("command_ids")
    if len(lines) == 0:
        return stage
    hit = pc.is_in(stage["line"], lines)
    reason = pc.if_else(hit, "duplicate_request_id", stage["reason"])
    detail = pc.if_else(
        hit,
        "request id already seen (at an earlier line of this file, or in another file)",
        stage["detail"],
    )
    stage = stage.set_column(stage.schema.get_field_index("reason"), "reason", reason)
    return stage.set_column(stage.schema.get_field_index("detail"), "detail", detail)


def _count_out_of_order(stage: pa.Table) -> int:
    """Accepted rows that arrive before the latest arrival of an earlier line (they are kept:
    replay sorts by time)."""
    ok = np.asarray(pc.is_null(stage["reason"]))
    if not ok.any():
        return 0
    lines = np.asarray(stage["line"])[ok]
    ts = np.asarray(pc.cast(stage["arrival_ts"], pa.int64()).filter(pa.array(ok)))
    ts = ts[np.argsort(lines, kind="stable")]
    earlier_max = np.maximum.accumulate(ts)
    return int(np.count_nonzero(ts[1:] < earlier_max[:-1]))

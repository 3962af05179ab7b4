"""Write parsed lines into the warehouse: accepted ones to ``requests``, the rest to ``rejects``.

A file is identified by the SHA-256 of its decompressed bytes. Its rows are staged while it
streams, then swapped in by one transaction that first deletes whatever the same content left
before: re-ingesting a file replaces its rows, never duplicates them, and a failure midway
leaves the warehouse as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from prefixscope import sql
from prefixscope.ingest.formats import FORMATS, IngestOptions
from prefixscope.ingest.lines import FileReadState, read_line_batches


@dataclass(frozen=True)
class FileResult:
    path: str
    file_id: str
    lines: int
    accepted: int
    rejected: int
    complete: bool
    replaced: bool  # the same content had been ingested before; its old rows were replaced


@dataclass(frozen=True)
class IngestResult:
    run_id: str
    files: tuple[FileResult, ...]

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
) -> IngestResult:
    """Ingest ``paths`` (plain or gzip, in this order) as ``format_name`` under ``run_id``."""
    if format_name not in FORMATS:
        raise ValueError(f"unknown format {format_name!r}; known: {', '.join(sorted(FORMATS))}")
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"no such input file: {', '.join(missing)}")
    return IngestResult(
        run_id, tuple(_ingest_one(con, Path(p), format_name, options, run_id) for p in paths)
    )


def _ingest_one(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    format_name: str,
    options: IngestOptions,
    run_id: str,
) -> FileResult:
    fmt = FORMATS[format_name]
    state = FileReadState()
    con.execute(sql.load("ingest/stage"))
    for batch in read_line_batches(path, state):
        con.register("batch", batch.table)
        try:
            fmt.parse(con, options).insert_into("ingest_stage")
        finally:
            con.unregister("batch")
    if state.truncated is not None:
        _mark_truncated(con, state)

    file_id = state.file_id
    params = {"file_id": file_id, "path": str(path), "format": format_name, "run_id": run_id}
    con.begin()
    try:
        replaced = (
            con.execute("SELECT count(*) FROM sources WHERE file_id = ?", [file_id]).fetchone()[0]
            > 0
        )
        for table in ("requests", "rejects", "sources"):
            con.execute(f"DELETE FROM {table} WHERE file_id = ?", [file_id])
        con.execute(sql.load("ingest/swap_in_requests"), params)
        con.execute(sql.load("ingest/swap_in_rejects"), params)
        accepted, rejected = con.execute(
            "SELECT count(*) FILTER (reason IS NULL), count(*) FILTER (reason IS NOT NULL) "
            "FROM ingest_stage"
        ).fetchone()
        con.execute(
            "INSERT INTO sources VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, now())",
            [
                file_id,
                str(path),
                format_name,
                state.bytes_read,
                state.lines,
                accepted,
                rejected,
                state.truncated is None,
                run_id,
            ],
        )
        con.commit()
    except BaseException:
        con.rollback()
        raise
    finally:
        con.execute("DROP TABLE IF EXISTS ingest_stage")
    # Every line read is staged exactly once; the identity below is what "nothing vanishes" means.
    assert accepted + rejected == state.lines, (accepted, rejected, state.lines)
    return FileResult(
        str(path), file_id, state.lines, accepted, rejected, state.truncated is None, replaced
    )


def _mark_truncated(con: duckdb.DuckDBPyConnection, state: FileReadState) -> None:
    """The tail of a cut-short stream is one rejected line, unless it is a whole valid line
    that only lost its newline (a JSON object cut short never parses)."""
    assert state.truncated is not None
    line, why = state.truncated
    detail = f"the file ends early ({why[:200]}); the lines before were kept"
    con.execute("DELETE FROM ingest_stage WHERE line = ? AND reason IS NOT NULL", [line])
    if not con.execute("SELECT count(*) FROM ingest_stage WHERE line = ?", [line]).fetchone()[0]:
        con.execute(
            "INSERT INTO ingest_stage (line, reason, detail) VALUES (?, 'truncated_file', ?)",
            [line, detail],
        )

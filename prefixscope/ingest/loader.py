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
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats import FORMATS, STAGE_SCHEMA, IngestOptions
from prefixscope.ingest.formats.base import conform
from prefixscope.ingest.lines import FileReadState, prefetch


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
    # The file's rows wait in memory (hashes and counts only, never text) until its identity is
    # known at the end of the stream; then one transaction swaps them in.
    staged: list[pa.Table] = []
    for batch in prefetch(fmt.batches(path, state)):
        rows = fmt.parse(con, batch, options)
        assert rows.num_rows == batch.num_rows, "a format must return one row per input row"
        staged.append(rows)
    if state.truncated is not None:
        staged = _mark_truncated(staged, *state.truncated)
    stage = pa.concat_tables(staged) if staged else STAGE_SCHEMA.empty_table()
    rejected = stage.num_rows - stage["reason"].null_count
    accepted = stage.num_rows - rejected
    # Every line read is staged exactly once: the identity that means "nothing vanishes".
    assert accepted + rejected == state.lines, (accepted, rejected, state.lines)

    file_id = state.file_id
    params = {"file_id": file_id, "path": str(path), "format": format_name, "run_id": run_id}
    con.register("ingest_stage", stage)
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
        con.unregister("ingest_stage")
    return FileResult(
        str(path), file_id, state.lines, accepted, rejected, state.truncated is None, replaced
    )


def _mark_truncated(staged: list[pa.Table], line: int, why: str) -> list[pa.Table]:
    """The tail of a cut-short stream is one rejected line (``truncated_file``), unless it is a
    whole valid line that only lost its newline (a JSON object cut short never parses)."""
    detail = f"the file ends early ({why[:200]}); the lines before were kept"
    tail = [t.filter(pc.equal(t["line"], line)) for t in staged]
    if any(t.num_rows and t["reason"][0].as_py() is None for t in tail):
        return staged  # the tail parsed: nothing was lost but its newline
    kept = [t.filter(pc.not_equal(t["line"], line)) for t in staged]
    marker = pa.table({"line": [line], "reason": ["truncated_file"], "detail": [detail]})
    return [*kept, conform(marker)]

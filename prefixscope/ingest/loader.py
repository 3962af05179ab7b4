"""Write parsed lines into the warehouse: accepted ones to ``requests``, the rest to ``rejects``.

A file is identified by the SHA-256 of its decompressed bytes. Its rows are staged while it
streams, then swapped in by one transaction that first deletes whatever the same content left
before: re-ingesting a file replaces its rows, never duplicates them, and a failure midway
leaves the warehouse as it was.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats import FORMATS, STAGE_SCHEMA, IngestOptions
from prefixscope.ingest.formats.base import conform
from prefixscope.ingest.lines import FileReadState, prefetch

#: Reject reasons that say "this line is not of the format" rather than "this value is bad".
_SHAPE_REASONS = {"invalid_utf8", "invalid_json", "not_an_object", "missing_field", "wrong_type"}
#: A file whose first this-many non-blank lines all fail on shape is not the format asked for.
SNIFF_LINES = 100


class FormatMismatch(ValueError):
    """The file is not the format asked for; nothing of it was written."""


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
    for p in paths:
        with Path(p).open("rb") as f:
            if f.read(4) == b"PAR1" and format_name != "tokens":
                raise FormatMismatch(f"{p} is a Parquet file; only --format tokens reads Parquet")
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
        if not staged:
            _sniff(rows, path, format_name)
        if options.pseudonymize_key:
            rows = pseudonymize(rows, options.pseudonymize_key)
        staged.append(rows)
    if state.truncated is not None:
        staged = _mark_truncated(staged, *state.truncated)
    file_id = state.file_id
    params = {"file_id": file_id, "path": str(path), "format": format_name, "run_id": run_id}
    stage = pa.concat_tables(staged) if staged else STAGE_SCHEMA.empty_table()
    stage = _reject_duplicates(con, stage, file_id)
    rejected = stage.num_rows - stage["reason"].null_count
    accepted = stage.num_rows - rejected
    # Every line read is staged exactly once: the identity that means "nothing vanishes".
    assert accepted + rejected == state.lines, (accepted, rejected, state.lines)
    out_of_order = _count_out_of_order(stage)
    reasons = pc.value_counts(pc.drop_null(stage["reason"])).to_pylist() if rejected else []
    reason_counts = tuple(
        sorted(((r["values"], r["counts"]) for r in reasons), key=lambda rc: (-rc[1], rc[0]))
    )

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
            "INSERT INTO sources VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now())",
            [
                file_id,
                str(path),
                format_name,
                state.bytes_read,
                state.lines,
                accepted,
                rejected,
                state.truncated is None,
                out_of_order,
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
        str(path),
        file_id,
        state.lines,
        accepted,
        rejected,
        state.truncated is None,
        replaced,
        out_of_order,
        reason_counts,
    )


def _reject_duplicates(con: duckdb.DuckDBPyConnection, stage: pa.Table, file_id: str) -> pa.Table:
    """Reject accepted rows whose request id was seen before (``duplicate_request_id.sql``).
    Only the narrow (line, id) columns go to DuckDB; most logs carry no id and skip this."""
    with_id = pc.and_(pc.is_null(stage["reason"]), pc.is_valid(stage["log_request_id"]))
    if not pc.any(with_id).as_py():
        return stage
    con.register("ids", stage.select(["line", "log_request_id"]).filter(with_id))
    try:
        dup = con.sql(sql.load("ingest/duplicate_request_ids"), params={"file_id": file_id})
        lines = dup.to_arrow_table()["line"]
    finally:
        con.unregister("ids")
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


def _sniff(rows: pa.Table, path: Path, format_name: str) -> None:
    """Fail fast, before anything is written, on a file that is not ``format_name``."""
    head = rows.filter(pc.not_equal(pc.fill_null(rows["reason"], ""), "blank_line"))
    head = head.slice(0, SNIFF_LINES)
    reasons = head["reason"].to_pylist()
    if not reasons or any(r is None or r not in _SHAPE_REASONS for r in reasons):
        return
    counts: dict[tuple[str, str], int] = {}
    for r, d in zip(reasons, head["detail"].to_pylist(), strict=True):
        counts[(r, d)] = counts.get((r, d), 0) + 1
    (reason, detail), _ = max(counts.items(), key=lambda kv: kv[1])
    raise FormatMismatch(
        f"{path} does not look like {format_name}: none of its first {len(reasons)} lines "
        f"parsed (most often: {reason}, {detail}); pick the right --format or field flags"
    )


def pseudonymize(rows: pa.Table, key: str) -> pa.Table:
    """Replace tenant names with ``t-`` + the first 16 hex digits of HMAC-SHA256(key, name):
    stable for one key, not reversible without it."""
    names = rows["tenant"]
    mapping = {
        n: "t-" + hmac.new(key.encode(), n.encode(), hashlib.sha256).hexdigest()[:16]
        for n in pc.unique(names).to_pylist()
        if n is not None
    }
    column = pa.array([None if n is None else mapping[n] for n in names.to_pylist()], pa.string())
    return rows.set_column(rows.schema.get_field_index("tenant"), "tenant", column)


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

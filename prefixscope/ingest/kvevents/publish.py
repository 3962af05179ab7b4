"""Capture files into the warehouse: ``kv_events``, ``rejects`` and ``sources``, in ONE
transaction for all the files of a command (all of them or nothing).

A file is the same file as an earlier source when it has the same content (the SHA-256 of its
bytes) or the same resolved path (a capture that grew): its earlier rows are replaced, as
:mod:`prefixscope.ingest.loader` does for request logs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from prefixscope.ingest.hashkey import HashKey, fingerprint_of, refuse_other_key
from prefixscope.ingest.kvevents.rows import FORMAT, ParsedCapture


@dataclass(frozen=True)
class CaptureFile:
    """One capture file, read and decoded; nothing of it is in the warehouse yet."""

    path: Path
    resolved: str
    file_id: str
    parsed: ParsedCapture


@dataclass(frozen=True)
class CaptureResult:
    path: str
    file_id: str
    frames: int
    lines: int
    accepted: int
    rejected: int
    complete: bool
    replaced: bool
    unlinked: int
    reasons: tuple[tuple[str, int], ...]


def file_id_of(path: Path) -> str:
    """The SHA-256 of the file's bytes: its identity, under any path."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def warehouse_block_sizes(con: duckdb.DuckDBPyConnection) -> set[int]:
    """The block sizes of the requests the warehouse holds (empty: none yet)."""
    return {int(s) for (s,) in con.execute("SELECT DISTINCT block_size FROM requests").fetchall()}


def publish_captures(
    con: duckdb.DuckDBPyConnection,
    files: list[CaptureFile],
    run_id: str,
    key: HashKey | None = None,
) -> list[CaptureResult]:
    """Replace each file's earlier rows and insert its new ones, all in one transaction, every
    hash keyed by ``key`` (None: plain), the warehouse's one key (``refuse_other_key``)."""
    results = []
    con.begin()
    try:
        # the earlier sources each file replaces (files given twice were read once: no two
        # files of a command match each other)
        matches = [
            [
                fid
                for (fid,) in con.execute(
                    "SELECT file_id FROM sources WHERE file_id = ? "
                    "OR coalesce(resolved_path, path) IN (?, ?)",
                    [f.file_id, f.resolved, str(f.path)],
                ).fetchall()
            ]
            for f in files
        ]
        replaced = {fid for m in matches for fid in m} | {f.file_id for f in files}
        refuse_other_key(con, key, sorted(replaced))
        for f, matched in zip(files, matches, strict=True):
            gone = sorted({*matched, f.file_id})
            for table in ("kv_events", "requests", "rejects", "sources"):
                con.execute(f"DELETE FROM {table} WHERE list_contains(?, file_id)", [gone])
            results.append(_insert(con, f, run_id, key, replaced=bool(matched)))
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return results


def keyed_events(rows: pa.Table, key: HashKey) -> pa.Table:
    """The event rows with the engine's hash bytes and prefixscope's block ids keyed: an
    engine hash becomes ``BLAKE2b-64(key, its bytes)``, a block id as ``requests.block_hashes``
    are keyed, so events still match each other and the requests."""
    for name in ("engine_block_hash", "engine_parent_hash"):
        at = rows.schema.get_field_index(name)
        values = [None if b is None else key.blob(b) for b in rows[name].to_pylist()]
        rows = rows.set_column(at, rows.schema.field(at), pa.array(values, pa.binary()))
    at = rows.schema.get_field_index("block_id")
    ids = rows["block_id"].combine_chunks()
    keyed = key.hashes(ids.fill_null(0).to_numpy(zero_copy_only=False))
    column = pa.array(keyed, pa.uint64(), mask=ids.is_null().to_numpy(zero_copy_only=False))
    return rows.set_column(at, rows.schema.field(at), column)


def _insert(
    con: duckdb.DuckDBPyConnection,
    f: CaptureFile,
    run_id: str,
    key: HashKey | None,
    *,
    replaced: bool,
) -> CaptureResult:
    p = f.parsed
    params = [f.file_id, run_id]
    con.register("new_events", p.rows if key is None else keyed_events(p.rows, key))
    con.register("new_rejects", p.rejects)
    try:
        con.execute(
            "INSERT INTO kv_events BY NAME SELECT ? AS file_id, ? AS ingest_run_id, * "
            "FROM new_events",
            params,
        )
        con.execute(
            "INSERT INTO rejects SELECT ?, {'file': ?, 'line': line}, ?, reason, detail, ? "
            "FROM new_rejects",
            [f.file_id, str(f.path), FORMAT, run_id],
        )
    finally:
        con.unregister("new_events")
        con.unregister("new_rejects")
    lines = p.accepted + p.rejected
    con.execute(
        """INSERT INTO sources (file_id, path, format, bytes, lines, accepted, rejected,
                                complete, out_of_order, ingest_run_id, ingested_at,
                                resolved_path, hash_key)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, now(), ?, ?)""",
        [
            f.file_id,
            str(f.path),
            FORMAT,
            p.bytes_read,
            lines,
            p.accepted,
            p.rejected,
            p.tail is None,
            run_id,
            f.resolved,
            fingerprint_of(key),
        ],
    )
    reasons = tuple(sorted(p.reasons.items(), key=lambda rc: (-rc[1], rc[0])))
    return CaptureResult(
        str(f.path),
        f.file_id,
        p.frames,
        lines,
        p.accepted,
        p.rejected,
        p.tail is None,
        replaced,
        p.unlinked,
        reasons,
    )

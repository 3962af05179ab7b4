"""Stage an ingest: read and parse every input file of a command, touching no warehouse.

Parsing runs on a private in-memory DuckDB. A file's rows (hashes and counts, never text) are
held in memory as Arrow until the next file is parsed; then they move to an uncompressed Arrow
IPC file in a private temporary directory, so only one file's full rows are in memory at a time
(the others keep their narrow columns). :mod:`prefixscope.ingest.loader` publishes them all in
one transaction, reading the files back by memory map (no copy). Arrow IPC is a plain dump of
the buffers, not a second database that encodes them: the rows are encoded once, into the
warehouse.

Everything a command can be refused for without the warehouse -- inputs that are not files, a
chat template that does not compile, a file of another format -- is raised here, before anything
is written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats import FORMATS, STAGE_SCHEMA, IngestOptions
from prefixscope.ingest.formats.agent_inputs import own_settings as agent_settings
from prefixscope.ingest.formats.agent_inputs import placement as agent_placement
from prefixscope.ingest.formats.base import (
    MAX_ARRIVAL_US,
    MIN_ARRIVAL_US,
    TIMESTAMP_OUT_OF_RANGE,
    conform,
    judge_tenants,
    mark_rejected,
)
from prefixscope.ingest.formats.mooncake import own_settings
from prefixscope.ingest.formats.openai import check_chat_template
from prefixscope.ingest.formats.paths import parse_path, show_path
from prefixscope.ingest.hashkey import keyed_lists
from prefixscope.ingest.hashkey import resolved as resolved_key
from prefixscope.ingest.lines import FileReadState, prefetch
from prefixscope.ingest.parallel import ordered_map
from prefixscope.ingest.refusals import (
    SNIFF_LINES,
    FormatMismatch,
    refuse_if_none_accepted,
    sniff,
)

__all__ = ["SNIFF_LINES", "FormatMismatch", "Staged", "StagedFile", "check_inputs", "stage_files"]

#: Rows per record batch of a spilled file: many batches let DuckDB copy them on every core.
ROWS_PER_STAGED_BATCH = 16_384


@dataclass
class StagedFile:
    """One input file read and parsed. Its full rows (:data:`STAGE_SCHEMA`: hashes and counts,
    never text) wait in memory (``held``) or, once spilled, in the Arrow IPC file
    ``rows_file``; ``stage`` keeps the narrow columns publishing decides on (line, reason,
    detail, log_request_id, arrival_ts), one row per line read, in the same order."""

    path: Path
    resolved: str  # its resolved absolute path: half of its identity (the other: file_id)
    state: FileReadState
    stage: pa.Table
    held: pa.Table | None = None
    rows_file: Path | None = None

    @property
    def file_id(self) -> str:
        return self.state.file_id

    def rows(self) -> pa.Table:
        """The full staged rows in batches of ROWS_PER_STAGED_BATCH: sliced from those held, or
        memory-mapped from ``rows_file`` (no copy either way)."""
        if self.held is not None:
            return pa.Table.from_batches(
                self.held.to_batches(max_chunksize=ROWS_PER_STAGED_BATCH), self.held.schema
            )
        assert self.rows_file is not None, "not staged"
        return pa.ipc.open_file(pa.memory_map(str(self.rows_file))).read_all()

    def spill(self, path: Path) -> None:
        """Move the full rows from memory to the Arrow IPC file ``path`` (once)."""
        if self.held is None:
            return
        rows = self.rows()
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as out:
            out.write_table(rows)
        self.rows_file, self.held = path, None


@dataclass
class Staged:
    """Every file of one command, parsed into private Arrow files (a temporary directory,
    removed by :meth:`close`); nothing of it is in any warehouse yet. Use it as a context
    manager, or call :meth:`close` after :func:`publish`."""

    format_name: str
    options: IngestOptions
    files: list[StagedFile]
    skipped: tuple[str, ...] = ()  # inputs given again (same path, or same content): read once
    staging_dir: Path | None = None

    def close(self) -> None:
        if self.staging_dir is not None:
            shutil.rmtree(self.staging_dir, ignore_errors=True)
            self.staging_dir = None

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_inputs(paths: Sequence[str | Path], format_name: str) -> None:
    """Refuse, before anything is read or written, inputs that are not regular readable files:
    a missing path (FileNotFoundError), a directory, a FIFO, a device or a socket (ValueError
    naming what it is), or a Parquet file given to a JSON-lines format (FormatMismatch)."""
    if format_name not in FORMATS:
        raise ValueError(f"unknown format {format_name!r}; known: {', '.join(sorted(FORMATS))}")
    if not paths:
        raise ValueError("no input file given")
    missing = [str(p) for p in paths if not os.path.lexists(p) or not Path(p).exists()]
    if missing:
        raise FileNotFoundError(
            f"no such input file: {', '.join(missing)} — check the path; nothing was written"
        )
    for p in paths:
        try:
            mode = os.stat(p).st_mode
        except OSError as exc:
            raise ValueError(f"cannot read {p}: {exc.strerror}") from exc
        if stat.S_ISDIR(mode) and format_name in DIRECTORY_FORMATS:
            continue  # a folder of conversations (formats/agent_inputs.py)
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
            raise ValueError(
                f"{p} is {kind}, not a log file: give regular files (plain, gzip or Parquet)"
            )
        try:
            with Path(p).open("rb") as f:
                head = f.read(4)
        except OSError as exc:
            raise ValueError(f"cannot read {p}: {exc.strerror or exc}") from exc
        if head == b"PAR1" and format_name != "tokens":
            raise FormatMismatch(f"{p} is a Parquet file; only --format tokens reads Parquet")


#: Formats whose input may be a directory (of per-conversation files).
DIRECTORY_FORMATS = ("agent-json",)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def stage_files(paths: Sequence[str | Path], format_name: str, options: IngestOptions) -> Staged:
    """Read and parse every file of a command, touching no warehouse: parsing runs on a private
    in-memory DuckDB, and each file's rows wait, in memory or (once the next file is parsed) in
    an Arrow file in a temporary directory, until :func:`publish` copies them. An input given
    twice -- the same resolved path, or the same content under another path -- is read once.
    Raises before anything is written (and then leaves no staging file)."""
    check_inputs(paths, format_name)
    options = dataclasses.replace(options, hash_key=resolved_key(options.hash_key))
    if format_name == "openai":
        check_chat_template(options)
    if format_name == "mooncake" and paths:  # a line may say its block size: the first one's
        options = own_settings(Path(paths[0]), options)
    placed: dict[Path, tuple[int, int]] = {}
    if format_name == "agent-json" and paths:  # the first conversation's block size
        options = agent_settings(Path(paths[0]), options)
        if len(paths) > 1:  # the inputs' conversations placed as one population
            placed = agent_placement(list(dict.fromkeys(Path(p) for p in paths)))
    result = Staged(format_name, options, [], (), Path(tempfile.mkdtemp(prefix="prefixscope-")))
    # Removed by close(); else when the object is collected or the interpreter exits.
    weakref.finalize(result, shutil.rmtree, result.staging_dir, True)
    skipped: list[str] = []
    seen_paths: set[str] = set()
    seen_ids: set[str] = set()
    try:
        parser = duckdb.connect()
        cursors: list[duckdb.DuckDBPyConnection] = []
        try:
            # Whatever DuckDB spills while parsing stays in the private directory.
            parser.execute("SET temp_directory = ?", [str(result.staging_dir)])
            cursors += [_configured(parser.cursor()) for _ in range(PARSERS)]
            for p in paths:
                resolved = str(Path(p).resolve())
                if resolved in seen_paths:
                    skipped.append(str(p))
                    continue
                seen_paths.add(resolved)
                if result.files:  # only the file being parsed is held whole in memory
                    last = len(result.files) - 1
                    result.files[last].spill(result.staging_dir / f"stage_{last}.arrow")
                mine = options
                if Path(p) in placed:
                    mine = dataclasses.replace(options, arrival_base=placed[Path(p)])
                staged = _stage_one(cursors, Path(p), resolved, format_name, mine)
                if staged.file_id in seen_ids:
                    skipped.append(str(p))
                    continue
                seen_ids.add(staged.file_id)
                staged.held, staged.stage = staged.stage, staged.stage.select(list(_NARROW))
                result.files.append(staged)
        finally:
            # a Ctrl-C inside a statement can leave its cursor busy for a moment: closing it
            # then fails, and that failure must not hide the interrupt (the database is ours,
            # in memory, and goes with the process)
            for cursor in cursors:
                with contextlib.suppress(duckdb.Error):
                    cursor.close()
            with contextlib.suppress(duckdb.Error):
                parser.close()
    except BaseException:
        result.close()
        raise
    result.skipped = tuple(skipped)
    return result


#: The stage columns that publishing decides on; the rest wait in the held or spilled rows only.
_NARROW = ("line", "reason", "detail", "log_request_id", "arrival_ts")


#: Batches parsed at a time (:func:`ordered_map`): two keep two cores busy.
PARSERS = 2


def _configured(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A parsing cursor: times in UTC, whatever the machine's zone; no progress bar."""
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")
    return con


def tenant_source(options: IngestOptions) -> str:
    """How reject messages name where the tenant came from."""
    path = options.field("tenant")
    if path:
        return show_path(parse_path(path))
    return options.tenant_from or "--tenant"


def _stage_one(
    cursors: list[duckdb.DuckDBPyConnection],
    path: Path,
    resolved: str,
    format_name: str,
    options: IngestOptions,
) -> StagedFile:
    fmt = FORMATS[format_name]
    state = FileReadState()
    staged: list[pa.Table] = []

    def parse(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> tuple[int, pa.Table]:
        rows = fmt.parse(con, batch, options)
        if options.hash_key is not None:  # keyed here, on the parsing threads (nogil)
            at = rows.schema.get_field_index("block_hashes")
            keyed = keyed_lists(rows["block_hashes"], options.hash_key)
            rows = rows.set_column(at, rows.schema.field(at), keyed)
        return batch.num_rows, rows

    # Closed on the way out, even on an error: no parse is left running on a cursor.
    with contextlib.closing(ordered_map(parse, prefetch(fmt.batches(path, state)), cursors)) as rs:
        for n, rows in rs:
            assert rows.num_rows == n, "a format must return one row per input row"
            # The rule on names applies to the name itself, before any pseudonym hides it.
            rows = judge_tenants(rows, tenant_source(options))
            if not staged:
                sniff(rows, path, format_name, options)
            if options.pseudonymize_key:
                rows = pseudonymize(rows, options.pseudonymize_key)
            staged.append(rows)
    if state.truncated is not None:
        staged = _mark_truncated(staged, *state.truncated)
    stage = pa.concat_tables(staged) if staged else STAGE_SCHEMA.empty_table()
    stage = judge_timestamps(stage)
    refuse_if_none_accepted(stage, path, format_name, options)
    # Every line read is staged exactly once: the identity that means "nothing vanishes".
    assert stage.num_rows == state.lines, (stage.num_rows, state.lines)
    return StagedFile(path, resolved, state, stage)


#: The spread rule: an arrival farther from the file's median arrival than this many times the
#: median distance to it (at least MIN_SPREAD_US) is ``timestamp_implausible``.
SPREAD_FACTOR = 1000
MIN_SPREAD_US = 3_600 * 1_000_000  # one hour: so a file of near-equal times keeps ~41 days


def judge_timestamps(stage: pa.Table) -> pa.Table:
    """Reject accepted rows whose arrival is out of the plausible range
    (``timestamp_out_of_range``, the formats reject most of them already) or far outside the
    file's own span (``timestamp_implausible``: farther from the median arrival than
    SPREAD_FACTOR x the median distance to it, that distance taken as at least one hour)."""
    ok = np.asarray(pc.is_null(stage["reason"]).to_numpy(zero_copy_only=False), dtype=bool)
    if not ok.any():
        return stage
    ts = pc.cast(stage["arrival_ts"], pa.int64()).to_numpy(zero_copy_only=False)
    ts = np.asarray(np.nan_to_num(ts.astype(np.float64), nan=0.0))
    out = ok & ((ts < MIN_ARRIVAL_US) | (ts >= MAX_ARRIVAL_US))
    if out.any():
        stage = mark_rejected(stage, out, *TIMESTAMP_OUT_OF_RANGE)
    keep = ok & ~out
    if keep.sum() >= 3:
        kept = ts[keep]
        median = float(np.median(kept))
        spread = max(float(np.median(np.abs(kept - median))), MIN_SPREAD_US)
        far = keep & (np.abs(ts - median) > SPREAD_FACTOR * spread)
        if far.any():
            stage = mark_rejected(
                stage,
                far,
                "timestamp_implausible",
                f"the arrival is more than {SPREAD_FACTOR}x the median distance from the "
                "file's median arrival (check --timestamp-unit / --start)",
            )
    return stage


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

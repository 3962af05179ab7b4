"""What all formats share: options, the stage schema and the protocol."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats.arrival import DEFAULT_ARRIVAL, Arrival
from prefixscope.ingest.formats.paths import parse_path
from prefixscope.ingest.hashkey import USER_KEY
from prefixscope.ingest.lines import FileReadState, read_line_batches
from prefixscope.tenants import check_tenant, tenant_problem

if TYPE_CHECKING:
    from prefixscope.ingest.hashkey import HashKey

#: Relative timestamps are placed after this instant unless ``--start`` says otherwise. The Unix
#: epoch means a log whose timestamps are already absolute epoch times keeps its real times.
DEFAULT_START = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_TENANT = "default"
#: The largest block size accepted (tokens per block): far above any engine's (16 to 512).
MAX_BLOCK_SIZE = 1_048_576
#: Plausible arrival times (epoch microseconds): a line whose timestamp, after its unit and
#: ``--start``, lands outside [1970-01-01, 2100-01-01) UTC -- or overflows, or is not finite -- is
#: rejected as ``timestamp_out_of_range`` (epoch microseconds in a milliseconds field land in the
#: year 50,000). The loader adds the per-file spread rule (``timestamp_implausible``).
MIN_ARRIVAL_US = 0
MAX_ARRIVAL_US = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp()) * 1_000_000
#: Longest line accepted (bytes): stops a runaway line (a file without newlines) from being parsed.
DEFAULT_MAX_LINE_BYTES = 16 << 20

#: What a format yields per input row; the loader moves accepted rows to ``requests`` and the
#: others (``reason`` set) to ``rejects``.
STAGE_SCHEMA = pa.schema(
    [
        ("line", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("arrival_ts", pa.timestamp("us", tz="UTC")),
        ("tenant", pa.string()),
        ("session_id", pa.string()),
        ("parent_session_id", pa.string()),
        ("log_request_id", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("block_size", pa.int32()),
        ("block_hashes", pa.list_(pa.uint64())),
        ("chat_id", pa.int64()),
        ("parent_chat_id", pa.int64()),
        ("turn", pa.int32()),
        ("request_type", pa.string()),
        ("reported_cached_tokens", pa.int64()),
        ("reported_prompt_tokens", pa.int64()),
        ("reported_cache_creation_tokens", pa.int64()),
        # True: the engine always computes the prompt's last token (a token source's rule,
        # Trace.recomputes_last_block); NULL: by the row's format (analysis/trace/load.py).
        ("last_token_rule", pa.bool_()),
        # agent-json: the model that served the request, why its output stopped, and the
        # server's and the client's seconds as the trace records them
        ("model", pa.string()),
        ("stop_reason", pa.string()),
        ("api_time_s", pa.float64()),
        ("think_time_s", pa.float64()),
    ]
)


@dataclass(frozen=True)
class IngestOptions:
    """Settings of one ingest. ``block_size=None`` means the format's own default; options a
    format does not use are ignored by it (each format's docs list the ones it reads)."""

    tenant: str = DEFAULT_TENANT
    block_size: int | None = None
    start: datetime = DEFAULT_START
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    tenant_from: str | None = None  # bailian: take the tenant from this field ("type")
    salt_tenants: bool = False  # token sources: a per-tenant salt in the first block
    timestamp_unit: str = "s"  # token sources: unit of numeric timestamps (s, ms, us)
    # Where token sources find their fields: canonical name -> field (dotted path / column).
    fields: tuple[tuple[str, str], ...] = ()
    chat_template: str | None = None  # openai: Jinja chat template file
    tokenizer: str | None = None  # openai: tokenizer.json of the model
    # openai: whose usage the lines carry (docs/ingest.md#usage-layouts); "auto": each line's own
    layout: str = "auto"
    pseudonymize_key: str | None = None  # replace tenant names by a keyed hash
    # Replace a file's earlier rows even when that turns lines accepted before into rejects
    # (``--replace``); without it such a re-ingest stops and changes nothing.
    replace: bool = False
    # mooncake: the ids name full blocks only and the last prompt token is always computed (a
    # token source's rules: what `prefixscope export` writes of a gateway-log warehouse).
    full_blocks: bool = False
    # openai, otlp: what these patterns match is moved to the end of the prompt before it is
    # rendered and hashed (``formats/restructure.py``): a what-if restructuring
    move_to_end: tuple[str, ...] = ()
    # agent-json: where each conversation starts on the timeline (``formats/arrival.py``)
    arrival: str = DEFAULT_ARRIVAL
    arrival_seed: int = 0
    # agent-json, set per input while staging: its first conversation's place among every
    # conversation of the command, and how many there are (0: the input's own count)
    arrival_base: tuple[int, int] = (0, 0)
    # Every stored block hash keyed by it (``ingest/hashkey.py``); None: plain hashes; the
    # default, ``USER_KEY``: the user's own key, made on first use (resolved when staging).
    hash_key: HashKey | str | None = USER_KEY

    def field(self, name: str, default: str | None = None) -> str | None:
        """The field mapped to canonical ``name`` (``--NAME-field``), else ``default``."""
        return dict(self.fields).get(name, default)

    @property
    def start_us(self) -> int:
        return int(self.start.timestamp() * 1_000_000)

    @property
    def unit_us(self) -> float:
        return {"s": 1e6, "ms": 1e3, "us": 1.0}[self.timestamp_unit]

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size <= 0:
            raise ValueError(f"block size must be positive, got {self.block_size}")
        if self.start.tzinfo is None:
            raise ValueError("start must carry a time zone (e.g. 2026-01-01T00:00:00Z)")
        check_tenant(self.tenant, "--tenant")
        Arrival.parse(self.arrival, self.arrival_seed)  # a bad placement stops before any work
        if self.move_to_end:
            from prefixscope.ingest.formats.restructure import check_patterns

            check_patterns(self.move_to_end)
        for name, path in self.fields:  # a path that does not parse stops before any work
            parse_path(path, field_flag(name))
        if self.field("tenant") and self.tenant_from:
            raise ValueError(
                "give --tenant-field or --tenant-from, not both — they both name the tenant"
            )
        from prefixscope.ingest.formats.usage import LAYOUT_CHOICES

        if self.layout not in LAYOUT_CHOICES:
            raise ValueError(
                f"layout must be one of {', '.join(LAYOUT_CHOICES)}, got {self.layout!r}"
            )
        if self.timestamp_unit not in ("s", "ms", "us"):
            raise ValueError(f"timestamp unit must be s, ms or us, got {self.timestamp_unit!r}")


def field_flag(name: str) -> str:
    """The flag that maps the field ``name`` of :attr:`IngestOptions.fields`."""
    return f"--{name.replace('_', '-')}-field"


class LogFormat(Protocol):
    """One log format: how its files are read in batches, and how a batch is parsed."""

    name: str
    default_block_size: int

    def batches(self, path: Path, state: FileReadState) -> Iterator[pa.Table]:
        """Numbered input rows (``line``, then the format's raw columns), in file order."""
        ...

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        """One :data:`STAGE_SCHEMA` row per row of ``batch``."""
        ...


class JsonLines:
    """Formats with one JSON object per line (plain or gzip)."""

    def batches(self, path: Path, state: FileReadState) -> Iterator[pa.Table]:
        for batch in read_line_batches(path, state):
            yield batch.table


def accepted_csr(rows: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray]:
    """The lists in ``column`` of the accepted rows as CSR ``(offsets, uint64 values)``; a
    rejected row gets an empty list, so offsets still index every row."""
    ok = pc.is_null(rows["reason"])
    lists = pc.if_else(ok, rows[column], pa.scalar(None, rows[column].type))
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    lists = lists.fill_null([]) if lists.null_count else lists
    offsets = np.asarray(lists.offsets, dtype=np.int64)
    return offsets - offsets[0], np.asarray(lists.flatten(), dtype=np.uint64)


def conform(table: pa.Table) -> pa.Table:
    """``table`` with the columns of :data:`STAGE_SCHEMA` in order; absent ones are NULL."""
    n = table.num_rows
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
        for f in STAGE_SCHEMA
    ]
    return pa.Table.from_arrays(columns, schema=STAGE_SCHEMA)


TIMESTAMP_OUT_OF_RANGE = (
    "timestamp_out_of_range",
    "the timestamp is not finite or lands outside 1970-01-01..2100-01-01 after its unit and "
    "--start",
)


def seconds_to_arrival(
    rows: pa.Table, column: str, options: IngestOptions
) -> tuple[pa.Table, pa.Array]:
    """Arrival times from ``column`` (seconds after ``--start``, DOUBLE; NULL where rejected):
    an accepted row whose value is not finite or lands outside the plausible range becomes a
    ``timestamp_out_of_range`` reject (never an overflow that aborts the file)."""
    seconds = np.asarray(pc.fill_null(rows[column], 0.0).cast(pa.float64()), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        micros = float(options.start_us) + seconds * 1e6
        bad = ~np.isfinite(micros) | (micros < MIN_ARRIVAL_US) | (micros >= MAX_ARRIVAL_US)
    bad &= np.asarray(pc.is_null(rows["reason"]).to_numpy(zero_copy_only=False), dtype=bool)
    if bad.any():
        rows = mark_rejected(rows, bad, *TIMESTAMP_OUT_OF_RANGE)
    safe = np.where(bad | ~np.isfinite(micros), 0.0, micros)
    safe = np.clip(safe, MIN_ARRIVAL_US, MAX_ARRIVAL_US)
    arrival = pa.array(np.round(safe).astype(np.int64)).cast(pa.timestamp("us", tz="UTC"))
    return rows, arrival


def mark_rejected(rows: pa.Table, where: np.ndarray, reason: str, detail: str) -> pa.Table:
    """``rows`` with ``reason``/``detail`` set on the rows where ``where`` holds."""
    mask = pa.array(where, pa.bool_())
    for name, value in (("reason", reason), ("detail", detail)):
        column = pc.if_else(mask, pa.scalar(value, pa.string()), rows[name])
        rows = rows.set_column(rows.schema.get_field_index(name), name, column)
    return rows


#: The reject reason of a line whose tenant breaks the rule on names (docs/ingest.md#tenant-names).
INVALID_TENANT = "invalid_tenant"


def judge_tenants(rows: pa.Table, source: str) -> pa.Table:
    """``rows`` with each accepted row whose tenant name breaks the rule of
    :mod:`prefixscope.tenants` (empty, blank, non-printable, too long, the fleet's ``*``)
    rejected as ``invalid_tenant``; the message names ``source`` (the field) and the rule
    broken, never the name. Judged once per distinct name."""
    ok = pc.is_null(rows["reason"])
    names = pc.unique(pc.drop_null(pc.filter(rows["tenant"], ok))).to_pylist()
    problems: dict[str, list[str]] = {}
    for name in names:
        problem = tenant_problem(name)
        if problem is not None:
            problems.setdefault(problem, []).append(name)
    for problem, bad in problems.items():
        where = pc.and_(ok, pc.is_in(rows["tenant"], pa.array(bad, pa.string())))
        detail = f"the tenant ({source}) is not a valid tenant name: {problem}"
        rows = mark_rejected(rows, np.asarray(where), INVALID_TENANT, detail)
    return rows

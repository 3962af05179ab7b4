"""Log formats: each turns a batch of raw lines into canonical fields or reject reasons.

A format is a small object behind the :class:`LogFormat` protocol, looked up by name in
:data:`FORMATS`; adding one never touches the loader.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import duckdb

from prefixscope import sql

#: Relative timestamps are placed after this instant unless ``--start`` says otherwise. The Unix
#: epoch means a log whose timestamps are already absolute epoch milliseconds keeps its real times.
DEFAULT_START = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_TENANT = "default"
#: Longest line accepted (bytes). A Mooncake line of 128K tokens at block size 512 is ~2 KB; this
#: limit only stops a runaway line (a whole file without newlines) from being parsed.
DEFAULT_MAX_LINE_BYTES = 16 << 20


@dataclass(frozen=True)
class IngestOptions:
    """Settings shared by all formats; ``block_size=None`` means the format's own default."""

    tenant: str = DEFAULT_TENANT
    block_size: int | None = None
    start: datetime = DEFAULT_START
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size <= 0:
            raise ValueError(f"block size must be positive, got {self.block_size}")
        if self.start.tzinfo is None:
            raise ValueError("start must carry a time zone (e.g. 2026-01-01T00:00:00Z)")
        if not self.tenant:
            raise ValueError("tenant must not be empty")


class LogFormat(Protocol):
    """One log format. ``parse`` reads the registered view ``batch(line, raw)`` and returns one
    row per line: ``line, reason, detail, arrival_ts, tenant, session_id, input_tokens,
    output_tokens, block_size, block_hashes`` (``reason`` NULL when accepted)."""

    name: str
    default_block_size: int

    def parse(
        self, con: duckdb.DuckDBPyConnection, options: IngestOptions
    ) -> duckdb.DuckDBPyRelation: ...


@dataclass(frozen=True)
class Mooncake:
    """Mooncake (FAST'25) traces: ``timestamp`` (ms, relative), ``input_length``,
    ``output_length``, ``hash_ids`` (prefix-chained block ids, taken as they are)."""

    name: str = "mooncake"
    default_block_size: int = 512

    def parse(
        self, con: duckdb.DuckDBPyConnection, options: IngestOptions
    ) -> duckdb.DuckDBPyRelation:
        return con.sql(
            f"""
            SELECT line, reason, detail,
                   CASE WHEN reason IS NULL THEN $start::TIMESTAMPTZ
                        + to_microseconds(CAST(round(ts_ms * 1000) AS BIGINT)) END AS arrival_ts,
                   $tenant::VARCHAR AS tenant, CAST(NULL AS VARCHAR) AS session_id,
                   input_tokens, output_tokens, $block_size::INTEGER AS block_size, block_hashes
            FROM ({sql.load("ingest/mooncake")})
            """,
            params={
                "block_size": options.block_size or self.default_block_size,
                "max_line_bytes": options.max_line_bytes,
                "start": options.start,
                "tenant": options.tenant,
            },
        )


FORMATS: dict[str, LogFormat] = {f.name: f for f in (Mooncake(),)}

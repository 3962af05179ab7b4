"""Mooncake (FAST'25) traces: ``timestamp`` (ms, relative), ``input_length``,
``output_length``, ``hash_ids`` (prefix-chained block ids, taken as they are); the tenant from
``--tenant-field PATH`` when one is mapped (a string or an integer, required), else
``--tenant``. A line may say its own ``block_size`` (``prefixscope export`` and the KVCache.AI
simulator's traces do): without ``--block-size`` the first line's is the ingest's, and a line
that says another is refused (``block_size_mismatch``). An export's ``last_token_rule: true``
on the first line reads the file as ``--full-blocks`` would. Other fields are ignored."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats import plain
from prefixscope.ingest.formats.base import (
    MAX_ARRIVAL_US,
    MAX_BLOCK_SIZE,
    MIN_ARRIVAL_US,
    IngestOptions,
    JsonLines,
    conform,
)
from prefixscope.ingest.formats.jsonfields import Field
from prefixscope.ingest.formats.paths import json_pointer, parse_path
from prefixscope.ingest.lines import first_line


@dataclass(frozen=True)
class Mooncake(JsonLines):
    name: str = "mooncake"
    default_block_size: int = 512

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        block_size = options.block_size or self.default_block_size
        tenant_path = options.field("tenant")
        # Lines of plain values are read by one cheap pass, whatever other fields they carry;
        # the rest (rare in a real log) go through the full rule chain, which alone decides
        # what is rejected and why.
        query = plain.fast_query(tenant_path)
        parsed = conform(
            plain.plain_rows(con, batch, options, block_size, query)
            if query is not None
            else pa.table({"line": pa.array([], pa.int64())})
        )
        if parsed.num_rows == batch.num_rows:
            return _in_line_order(parsed)
        params = {
            "block_size": block_size,
            "full_blocks": options.full_blocks,
            "max_line_bytes": options.max_line_bytes,
            "start": options.start,
            "tenant": options.tenant,
            "min_us": MIN_ARRIVAL_US,
            "max_us": MAX_ARRIVAL_US,
            "tenant_path": json_pointer(parse_path(tenant_path)) if tenant_path else None,
            "tenant_label": Field("tenant", tenant_path, "id").label if tenant_path else "",
        }
        rest = batch.filter(pc.invert(pc.is_in(batch["line"], parsed["line"])))
        con.register("batch", rest)
        try:
            slow = con.sql(sql.load("ingest/mooncake"), params=params).to_arrow_table()
        finally:
            con.unregister("batch")
        return pa.concat_tables([parsed, conform(slow)]).sort_by("line")


def own_settings(path: Path, options: IngestOptions) -> IngestOptions:
    """``options`` with what the file's first line says of itself where no flag says it: its
    ``block_size`` (a positive integer) and, when it is ``true``, its ``last_token_rule`` (the
    file then names full blocks only, as ``--full-blocks``)."""
    raw = first_line(path)
    try:
        line = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return options  # the line is for the rules to judge
    if not isinstance(line, dict):
        return options
    size = line.get("block_size")
    if options.block_size is None and type(size) is int and 0 < size <= MAX_BLOCK_SIZE:
        options = replace(options, block_size=size)
    if line.get("last_token_rule") is True and not options.full_blocks:
        options = replace(options, full_blocks=True)
    return options


def _in_line_order(rows: pa.Table) -> pa.Table:
    """``rows`` sorted by line: as they are when already in order (the usual case)."""
    line = rows["line"].to_numpy()
    return rows if bool(np.all(line[1:] > line[:-1])) else rows.sort_by("line")

"""Mooncake (FAST'25) traces: ``timestamp`` (ms, relative), ``input_length``,
``output_length``, ``hash_ids`` (prefix-chained block ids, taken as they are); the tenant from
``--tenant-field PATH`` when one is mapped (a string or an integer, required), else
``--tenant``. Other fields a line carries are ignored."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats import plain
from prefixscope.ingest.formats.base import (
    MAX_ARRIVAL_US,
    MIN_ARRIVAL_US,
    IngestOptions,
    JsonLines,
    conform,
)
from prefixscope.ingest.formats.jsonfields import Field
from prefixscope.ingest.formats.paths import json_pointer, parse_path


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


def _in_line_order(rows: pa.Table) -> pa.Table:
    """``rows`` sorted by line: as they are when already in order (the usual case)."""
    line = rows["line"].to_numpy()
    return rows if bool(np.all(line[1:] > line[:-1])) else rows.sort_by("line")

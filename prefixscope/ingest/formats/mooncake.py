"""Mooncake (FAST'25) traces: ``timestamp`` (ms, relative), ``input_length``,
``output_length``, ``hash_ids`` (prefix-chained block ids, taken as they are)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats.base import (
    MAX_ARRIVAL_US,
    MIN_ARRIVAL_US,
    IngestOptions,
    JsonLines,
    conform,
)


@dataclass(frozen=True)
class Mooncake(JsonLines):
    name: str = "mooncake"
    default_block_size: int = 512

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        params = {
            "block_size": options.block_size or self.default_block_size,
            "max_line_bytes": options.max_line_bytes,
            "start": options.start,
            "tenant": options.tenant,
            "min_us": MIN_ARRIVAL_US,
            "max_us": MAX_ARRIVAL_US,
        }
        # Lines in the canonical shape are read by one cheap pass; the rest (rare in a real
        # log) go through the full rule chain, which alone decides what is rejected and why.
        con.register("batch", batch)
        try:
            parsed = con.sql(sql.load("ingest/mooncake_fast"), params=params).to_arrow_table()
            if parsed.num_rows < batch.num_rows:
                rest = batch.filter(pc.invert(pc.is_in(batch["line"], parsed["line"])))
                con.register("batch", rest)
                slow = con.sql(sql.load("ingest/mooncake"), params=params).to_arrow_table()
                parsed = pa.concat_tables([parsed, slow], promote_options="permissive")
                parsed = parsed.sort_by("line")
        finally:
            con.unregister("batch")
        return conform(parsed)

"""Mooncake (FAST'25) traces: ``timestamp`` (ms, relative), ``input_length``,
``output_length``, ``hash_ids`` (prefix-chained block ids, taken as they are); the tenant from
``--tenant-field PATH`` when one is mapped (a string or an integer, required), else
``--tenant``. Other fields a line carries are ignored."""

from __future__ import annotations

import json
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
from prefixscope.ingest.formats.jsonfields import ROOT, Field, json_path

#: The fields every Mooncake line has, read as their raw JSON by the fast path.
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True)
class Mooncake(JsonLines):
    name: str = "mooncake"
    default_block_size: int = 512

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        tenant_path = options.field("tenant")
        params = {
            "block_size": options.block_size or self.default_block_size,
            "max_line_bytes": options.max_line_bytes,
            "start": options.start,
            "tenant": options.tenant,
            "min_us": MIN_ARRIVAL_US,
            "max_us": MAX_ARRIVAL_US,
        }
        fast = fast_query(tenant_path)
        # Lines of plain values are read by one cheap pass, whatever other fields they carry;
        # the rest (rare in a real log) go through the full rule chain, which alone decides
        # what is rejected and why.
        con.register("batch", batch)
        try:
            if fast is not None:
                query, structure = fast
                fast_params = {**params, "structure": structure, "tenant_field": bool(tenant_path)}
                parsed = con.sql(query, params=fast_params).to_arrow_table()
            else:
                parsed = conform(pa.table({"line": pa.array([], pa.int64())}))
            if parsed.num_rows < batch.num_rows:
                rest = batch.filter(pc.invert(pc.is_in(batch["line"], parsed["line"])))
                con.register("batch", rest)
                slow_params = {
                    **params,
                    "tenant_path": json_path(tenant_path) if tenant_path else None,
                    "tenant_label": Field("tenant", tenant_path or "", "id").label,
                }
                slow = con.sql(sql.load("ingest/mooncake"), params=slow_params).to_arrow_table()
                parsed = pa.concat_tables(
                    [conform(parsed), conform(slow)], promote_options="permissive"
                )
                parsed = parsed.sort_by("line")
        finally:
            con.unregister("batch")
        return conform(parsed)


def fast_query(tenant_path: str | None) -> tuple[str, str] | None:
    """The fast path's SQL and its ``json_transform`` structure: the four fields and, when one
    is mapped, the tenant at its dotted path, each read as raw JSON. None when the tenant path
    is the line itself or lies inside one of the four fields: then every line takes the full
    rule chain."""
    structure: dict[str, object] = dict.fromkeys(FIELDS, "JSON")
    access = "NULL::JSON"
    if tenant_path:
        parts = tenant_path.split(".")
        if tenant_path == ROOT or parts[0] in FIELDS or "" in parts:
            return None
        node = structure
        for part in parts[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[parts[-1]] = "JSON"
        access = "f." + ".".join('"' + p.replace('"', '""') + '"' for p in parts)
    query = sql.load("ingest/mooncake_fast").replace("f.tenant_path", access)
    return query, json.dumps(structure)

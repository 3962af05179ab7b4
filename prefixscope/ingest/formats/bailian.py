"""Bailian (Alibaba Qwen serving) traces of "KVCache Cache in the Wild" (ATC'25): JSON lines
with ``chat_id``, ``parent_chat_id`` (-1 for a first turn), ``timestamp`` (seconds, relative),
``input_length``, ``output_length``, ``type`` (text/search/image/file), ``turn`` and
``hash_ids``: per-block *content* ids, 16 tokens a block. The ids are not prefix-chained, so
they are chained here (``hashing.chain_block_ids``): equal ids at another position, or after
another prefix, never match. The tenant is ``--tenant`` unless ``--tenant-from type`` or
``--tenant-field PATH`` (a string or an integer, required) says where it is."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats.base import (
    IngestOptions,
    JsonLines,
    accepted_csr,
    conform,
    seconds_to_arrival,
)
from prefixscope.ingest.formats.jsonfields import Check, Field, parse_fields
from prefixscope.ingest.hashing import chain_block_ids

FIELDS = (
    Field("chat_id", "chat_id", "integer", minimum=0),
    Field("parent_chat_id", "parent_chat_id", "integer", minimum=-1),
    Field("ts", "timestamp", "number", minimum=0),
    Field("input_tokens", "input_length", "integer", minimum=1),
    Field("output_tokens", "output_length", "integer", minimum=0),
    Field("request_type", "type", "string"),
    Field("turn", "turn", "integer", minimum=1),
    Field("ids", "hash_ids", "integer_array"),
)


@dataclass(frozen=True)
class Bailian(JsonLines):
    name: str = "bailian"
    default_block_size: int = 16

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        if options.tenant_from not in (None, "type"):
            raise ValueError(
                f"bailian takes the tenant from 'type' only, not {options.tenant_from!r}"
            )
        tenant_path = options.field("tenant")  # never with tenant_from: IngestOptions refuses
        bs = options.block_size or self.default_block_size
        needed = f"(input_tokens + {bs} - 1) // {bs}"
        checks = [
            Check(
                "block_count_mismatch",
                f"len(ids) <> {needed}",
                f"format('hash_ids has {{}} blocks; input_length {{}} at block size {bs} "
                f"needs {{}}', len(ids), input_tokens, {needed})",
            ),
            Check("self_parent", "parent_chat_id = chat_id", "'parent_chat_id equals chat_id'"),
        ]
        fields = [*FIELDS, Field("tenant", tenant_path, "id")] if tenant_path else FIELDS
        rows = parse_fields(con, batch, fields, checks, options.max_line_bytes)
        offsets, ids = accepted_csr(rows, "ids")
        chained = chain_block_ids(offsets, ids)
        block_hashes = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(chained))
        rows, arrival = seconds_to_arrival(rows, "ts", options)
        if tenant_path:
            tenant = rows["tenant"]
        elif options.tenant_from == "type":
            tenant = rows["request_type"]
        else:
            tenant = pa.array([options.tenant] * rows.num_rows, pa.string())
        return conform(
            pa.table(
                {
                    "line": rows["line"],
                    "reason": rows["reason"],
                    "detail": rows["detail"],
                    "arrival_ts": arrival,
                    "tenant": tenant,
                    "log_request_id": pc.cast(rows["chat_id"], pa.string()),
                    "input_tokens": rows["input_tokens"],
                    "output_tokens": rows["output_tokens"],
                    "block_size": pa.array([bs] * rows.num_rows, pa.int32()),
                    "block_hashes": block_hashes,
                    "chat_id": rows["chat_id"],
                    "parent_chat_id": rows["parent_chat_id"],
                    "turn": rows["turn"],
                    "request_type": rows["request_type"],
                }
            )
        )

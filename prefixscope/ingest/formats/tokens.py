"""Token-id tables: JSON lines or a Parquet file with a ``token_ids`` list per request and,
optionally, a timestamp, tenant, session id, request id and output token count, each column
named by a flag (``--token-field``, ``--timestamp-field``, ``--tenant-field``,
``--session-field``, ``--request-id-field``, ``--output-tokens-field``). Full blocks of
``--block-size`` tokens (default 16) are hashed as in ``prefixscope.ingest.hashing``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from prefixscope.ingest.formats.base import MAX_ARRIVAL_US, MIN_ARRIVAL_US, IngestOptions
from prefixscope.ingest.formats.jsonfields import Check, Field, parse_fields
from prefixscope.ingest.formats.tokensource import MAX_TOKEN_ID, arrival_field, finish_token_rows
from prefixscope.ingest.lines import FileReadState, read_line_batches

PARQUET_MAGIC = b"PAR1"
PARQUET_ROWS_PER_BATCH = 65_536


def token_fields(options: IngestOptions) -> list[Field]:
    """The fields a token table is read with, after the flags' mapping."""
    fields = [
        Field("token_ids", options.field("token", "token_ids"), "integer_array"),
        arrival_field(options),
    ]
    optional = {
        "tenant": "id",
        "session_id": "id",
        "log_request_id": "id",
        "output_tokens": "integer",
    }
    flags = {
        "tenant": "tenant",
        "session_id": "session",
        "log_request_id": "request_id",
        "output_tokens": "output_tokens",
    }
    for name, kind in optional.items():
        path = options.field(flags[name])
        if path:  # a mapped column is required: a row without it is rejected, not guessed
            minimum = 0 if name == "output_tokens" else None
            fields.append(Field(name, path, kind, minimum=minimum))  # type: ignore[arg-type]
    return fields


CHECKS = (
    Check("out_of_range", "len(token_ids) = 0", "'token_ids is empty'"),
    Check(
        "out_of_range",
        f"list_max(token_ids) > {MAX_TOKEN_ID}",
        "'token_ids holds an id of 2**32 or more'",
    ),
)


@dataclass(frozen=True)
class Tokens:
    name: str = "tokens"
    default_block_size: int = 16

    def batches(self, path: Path, state: FileReadState) -> Iterator[pa.Table]:
        with path.open("rb") as f:
            parquet = f.read(4) == PARQUET_MAGIC
        if not parquet:
            for batch in read_line_batches(path, state):
                yield batch.table
            return
        # A Parquet file is typed already: each row becomes one JSON-free "line" (its 1-based
        # row number), so validation and the reject table work the same as for JSON lines.
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(8 << 20), b""):
                state.sha256.update(chunk)
                state.bytes_read += len(chunk)
        first = 1
        for record in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_ROWS_PER_BATCH):
            table = pa.Table.from_batches([record])
            line = pa.array(range(first, first + table.num_rows), pa.int64())
            first += table.num_rows
            state.lines += table.num_rows
            yield table.add_column(0, "line", line)

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        fields = token_fields(options)
        if "raw" in batch.column_names and batch.schema.field("raw").type == pa.large_binary():
            rows = parse_fields(con, batch, fields, CHECKS, options.max_line_bytes)
        else:
            rows = _parse_parquet(con, batch, fields)
        if "tenant" not in rows.column_names:
            rows = rows.append_column("tenant", pa.array([options.tenant] * rows.num_rows))
        return finish_token_rows(rows, options, options.block_size or self.default_block_size)


def _parse_parquet(
    con: duckdb.DuckDBPyConnection, batch: pa.Table, fields: list[Field]
) -> pa.Table:
    """Validate typed Parquet columns with the same reasons as JSON lines: a column that is not
    there fails the file; a NULL is missing_field; a value of the wrong type is wrong_type."""
    batch = _columns(batch, fields)
    labels = {f"label_{f.name}": f.label for f in fields}  # bound: a path is never SQL text
    con.register("batch", batch)
    try:
        exprs, absent, wrong = [], [], []
        for f in fields:
            col = f"c_{f.name}"
            typ = batch.schema.field(col).type
            if f.kind == "integer_array":
                ok = pa.types.is_list(typ) or pa.types.is_large_list(typ)
                ok = ok and pa.types.is_integer(typ.value_type)
                value = f"TRY_CAST({col} AS UBIGINT[])" if ok else "NULL"
                bad = (
                    (
                        f"({col} IS NOT NULL AND (list_count({value}) < len({col}) "
                        f"OR list_min({col}) < 0))"
                    )
                    if ok
                    else f"({col} IS NOT NULL)"
                )
            elif f.kind == "time":
                if pa.types.is_timestamp(typ):
                    value = f"epoch_us({col})"
                elif pa.types.is_integer(typ) or pa.types.is_floating(typ):
                    value = f"{f.start_us}::DOUBLE + {col}::DOUBLE * {f.unit_us}"
                else:
                    value = "NULL"
                bad = f"({col} IS NOT NULL AND ({value}) IS NULL)"
            elif f.kind == "integer":
                value = f"TRY_CAST({col} AS BIGINT)" if pa.types.is_integer(typ) else "NULL"
                bad = f"({col} IS NOT NULL AND ({value}) IS NULL)"
            else:  # id
                value = f"CAST({col} AS VARCHAR)"
                bad = "false"
            exprs.append(f"{value} AS {f.name}")
            absent.append(f"CASE WHEN {col} IS NULL THEN $label_{f.name} END")
            wrong.append(f"CASE WHEN {bad} THEN $label_{f.name} END")
        time_range = " OR ".join(
            f"({f.name} IS NOT NULL AND (NOT isfinite({f.name}::DOUBLE) "
            f"OR {f.name} < {MIN_ARRIVAL_US} OR {f.name} >= {MAX_ARRIVAL_US}))"
            for f in fields
            if f.kind == "time"
        )
        time_range = time_range or "false"
        outputs = ", ".join(
            f"CASE WHEN reason IS NULL THEN CAST(round({f.name}) AS BIGINT) END AS {f.name}"
            if f.kind == "time"
            else f.name
            for f in fields
        )
        minimum = " OR ".join(f"{f.name} < {f.minimum}" for f in fields if f.minimum is not None)
        query = f"""
        WITH v AS (
            SELECT line,
                   list_filter([{", ".join(absent)}], lambda x: x IS NOT NULL) AS absent,
                   list_filter([{", ".join(wrong)}], lambda x: x IS NOT NULL) AS wrong,
                   {", ".join(exprs)}
            FROM batch
        ), judged AS (
            SELECT *, CASE
                WHEN len(absent) > 0 THEN 'missing_field'
                WHEN len(wrong) > 0 THEN 'wrong_type'
                WHEN {minimum or "false"} THEN 'out_of_range'
                WHEN {time_range} THEN 'timestamp_out_of_range'
                {" ".join(f"WHEN {c.bad} THEN '{c.reason}'" for c in CHECKS)}
            END AS reason FROM v
        )
        SELECT line, reason, CASE reason
                WHEN 'missing_field' THEN 'missing or null: ' || array_to_string(absent, ', ')
                WHEN 'wrong_type' THEN 'wrong type: ' || array_to_string(wrong, ', ')
                WHEN 'out_of_range' THEN
                    CASE WHEN len(token_ids) = 0 THEN 'token_ids is empty'
                         ELSE 'a value is out of range' END
                WHEN 'timestamp_out_of_range' THEN 'the timestamp is not finite or lands '
                    || 'outside 1970-01-01..2100-01-01 after its unit and --start'
            END AS detail, {outputs}
        FROM judged ORDER BY line
        """
        return con.sql(query, params=labels).to_arrow_table()
    finally:
        con.unregister("batch")


def _columns(batch: pa.Table, fields: list[Field]) -> pa.Table:
    """``line`` and, per field, the column at its path as ``c_NAME`` (NAME: this code's word,
    never the file's): the path's first key is a column, each further key a field of a struct.
    A path that leads to no column fails the file, naming it."""
    columns = {"line": batch["line"]}
    missing = []
    for f in fields:
        column = _at(batch, f.keys)
        if column is None:
            missing.append(f.label)
        else:
            columns[f"c_{f.name}"] = column
    if missing:
        raise ValueError(
            f"the Parquet file has no column {', '.join(missing)} — map columns with "
            "--token-field, --timestamp-field, ... (docs/ingest.md#field-paths)"
        )
    return pa.table(columns)


def _at(batch: pa.Table, keys: tuple[str, ...]) -> pa.ChunkedArray | None:
    """The column at ``keys`` (the first of equal names), or None when there is none."""
    found = batch.schema.get_all_field_indices(keys[0]) if keys else []
    if not found:
        return None
    column = batch.column(found[0])
    for key in keys[1:]:
        typ = column.type
        index = typ.get_field_index(key) if pa.types.is_struct(typ) else -1
        if index < 0:
            return None
        column = pc.struct_field(column, [index])
    return column

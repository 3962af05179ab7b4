"""Validate and extract named fields of JSON lines, for formats whose field names come from
flags (``--tenant-field user``): the query is built from a list of :class:`Field` specs, so each
format states its fields and rules once and shares one rule chain.

Every line gets exactly one outcome: the values (``reason`` NULL) or the first rule it breaks:
blank_line, line_too_long, invalid_utf8, invalid_json, not_an_object, missing_field,
wrong_type, out_of_range, timestamp_out_of_range (a ``time`` field: not finite, or outside
1970-01-01..2100-01-01), then the format's own checks, in the order given. Messages name the
fields, never their values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import duckdb
import pyarrow as pa

from prefixscope.ingest.formats.base import MAX_ARRIVAL_US, MIN_ARRIVAL_US

Kind = Literal["integer", "number", "string", "id", "integer_array", "json", "time"]

_INTEGER = r"-?[0-9]{1,18}"
_ARRAY = r"\[([0-9]{1,20}(,[0-9]{1,20})*)?\]"
_EXPECTED = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "id": "a string or an integer",
    "integer_array": "an array of non-negative integers",
    "json": "a JSON value",
    "time": "a number or an ISO 8601 time",
}


#: The path of the line itself (``--request-field .``: the line is the request body).
ROOT = "."


def json_path(path: str) -> str:
    """The JSON path of a dotted path; :data:`ROOT` is the whole line."""
    return "$" if path == ROOT else "$." + ".".join(f'"{p}"' for p in path.split("."))


@dataclass(frozen=True)
class Field:
    """One field: output column ``name``, read at ``path`` (dotted: ``usage.prompt_tokens``;
    :data:`ROOT`, ``.``: the line itself)."""

    name: str
    path: str
    kind: Kind
    required: bool = True
    minimum: int | None = None  # for integer and number kinds
    # For kind "time": a number counts `unit_us` microseconds from `start_us` (epoch µs); a
    # string is an ISO 8601 time. The value is epoch microseconds.
    unit_us: float = 1_000_000
    start_us: int = 0
    #: Where else to look, in order, on a line where ``path`` is absent or null: for a
    #: format's defaults only (a path a flag names is never second-guessed). :data:`ROOT` is
    #: the line itself, taken only when the line has the top-level key ``root_if`` (not null).
    fallbacks: tuple[str, ...] = ()
    root_if: str | None = None

    @property
    def json_path(self) -> str:
        return json_path(self.path)

    @property
    def label(self) -> str:
        """How messages name the field: its path, and where else it was looked for."""

        def name(path: str) -> str:
            if path != ROOT:
                return path
            return f"top-level {self.root_if}" if self.root_if else "the line"

        also = f" (or {' or '.join(map(name, self.fallbacks))})" if self.fallbacks else ""
        return (name(self.path) + also).replace("'", "''")  # it goes into SQL text


@dataclass(frozen=True)
class Check:
    """A format rule on extracted values: rows where ``bad`` (SQL) holds get ``reason``."""

    reason: str
    bad: str
    detail: str  # SQL expression for the message


def parse_fields(
    con: duckdb.DuckDBPyConnection,
    batch: pa.Table,
    fields: Sequence[Field],
    checks: Sequence[Check] = (),
    max_line_bytes: int = 16 << 20,
) -> pa.Table:
    """``line, reason, detail`` and one column per field, for each row of ``batch(line, raw)``."""
    con.register("batch", batch)
    try:
        return con.sql(_query(fields, checks), params={"max": max_line_bytes}).to_arrow_table()
    finally:
        con.unregister("batch")


def _value(f: Field, v: str) -> str:
    """SQL for the typed value of field ``f`` from its JSON ``v``; NULL when the type is wrong."""
    t = f"json_type({v})"
    return {
        "integer": f"CASE WHEN regexp_full_match({v}::VARCHAR, '{_INTEGER}') "
        f"THEN CAST({v}::VARCHAR AS BIGINT) END",
        "number": f"CASE WHEN {t} IN ('UBIGINT', 'BIGINT', 'DOUBLE') "
        f"THEN TRY_CAST({v}::VARCHAR AS DOUBLE) END",
        "string": f"CASE WHEN {t} = 'VARCHAR' THEN {v} ->> '$' END",
        "id": f"CASE WHEN {t} = 'VARCHAR' THEN {v} ->> '$' "
        f"WHEN regexp_full_match({v}::VARCHAR, '{_INTEGER}') THEN {v}::VARCHAR END",
        "integer_array": f"CASE WHEN regexp_full_match({v}::VARCHAR, '{_ARRAY}') "
        f"THEN TRY_CAST({v}::VARCHAR AS UBIGINT[]) END",
        "json": f"{v}",
        # DOUBLE epoch µs here (never an overflowing cast): the range rule rejects what does
        # not fit, and the output casts the rest to BIGINT. An ISO string that parses to an
        # infinite time ('infinity') is +inf, so it is out of range too.
        "time": f"CASE WHEN {t} IN ('UBIGINT', 'BIGINT', 'DOUBLE') "
        f"THEN {f.start_us}::DOUBLE + TRY_CAST({v}::VARCHAR AS DOUBLE) * {f.unit_us} "
        f"WHEN {t} = 'VARCHAR' THEN CASE "
        f"WHEN NOT isfinite(TRY_CAST({v} ->> '$' AS TIMESTAMPTZ)) THEN 'inf'::DOUBLE "
        f"ELSE epoch_us(TRY_CAST({v} ->> '$' AS TIMESTAMPTZ))::DOUBLE END END",
    }[f.kind]


def _present(v: str) -> str:
    return f"({v} IS NOT NULL AND json_type({v}) <> 'NULL')"


def _raw_columns(fields: Sequence[Field]) -> tuple[list[str], list[str]]:
    """The JSON paths to extract in one call (``v``), and each field's raw JSON value: its
    path, else the first of its fallbacks present on the line."""
    paths: list[str] = []

    def slot(path: str) -> str:
        if path == ROOT:
            return "j"
        paths.append(f"'{json_path(path)}'")
        return f"v[{len(paths)}]"

    columns = []
    for f in fields:
        main = slot(f.path)
        whens = []
        for alt in f.fallbacks:
            if alt == ROOT and f.root_if:
                whens.append((_present(f"json_extract(j, '{json_path(f.root_if)}')"), "j"))
            else:
                v = slot(alt)
                whens.append((_present(v), v))
        if whens:
            cases = " ".join(f"WHEN {c} THEN {v}" for c, v in [(_present(main), main), *whens])
            main = f"CASE {cases} ELSE {main} END"
        columns.append(f"{main} AS raw_{f.name}")
    return paths, columns


def _query(fields: Sequence[Field], checks: Sequence[Check]) -> str:
    extract, raw = _raw_columns(fields)
    values = f"json_extract(j, [{', '.join(extract)}])" if extract else "NULL"
    raw_cols = ",\n           ".join(raw)
    typed = ",\n           ".join(f"{_value(f, f'raw_{f.name}')} AS {f.name}" for f in fields)

    def absent(f: Field) -> str:
        return f"(raw_{f.name} IS NULL OR json_type(raw_{f.name}) = 'NULL')"

    def mistyped(f: Field) -> str:
        bad = f"({f.name} IS NULL)"
        if f.kind == "integer_array":  # an element past 2**64 casts to NULL
            bad = f"({f.name} IS NULL OR list_count({f.name}) < len({f.name}))"
        return f"(NOT {absent(f)} AND {bad})"

    def low(f: Field) -> str:
        return f"({f.name} < {f.minimum})" if f.minimum is not None else "false"

    def names(cond, fs: Sequence[Field]) -> str:  # type: ignore[no-untyped-def]
        parts = ", ".join(f"CASE WHEN {cond(f)} THEN '{f.label}' END" for f in fs)
        return f"array_to_string(list_filter([{parts}], lambda x: x IS NOT NULL), ', ')"

    times = [f for f in fields if f.kind == "time"]

    def unplausible(f: Field) -> str:
        return (
            f"({f.name} IS NOT NULL AND (NOT isfinite({f.name}) OR {f.name} < {MIN_ARRIVAL_US} "
            f"OR {f.name} >= {MAX_ARRIVAL_US}))"
        )

    time_range = " OR ".join(unplausible(f) for f in times) or "false"
    required = [f for f in fields if f.required]
    bounded = [f for f in fields if f.minimum is not None]
    missing = " OR ".join(absent(f) for f in required) or "false"
    wrong = " OR ".join(mistyped(f) for f in fields) or "false"
    out_of_range = " OR ".join(low(f) for f in bounded) or "false"
    format_checks = "\n".join(f"            WHEN {c.bad} THEN '{c.reason}'" for c in checks)
    format_details = "\n".join(
        f"        WHEN reason = '{c.reason}' AND ({c.bad}) THEN {c.detail}" for c in checks
    )
    wrong_detail = " || '; ' || ".join(
        f"CASE WHEN {mistyped(f)} THEN '{f.label} is ' || coalesce(json_type(raw_{f.name}), '?') "
        f"|| ', expected {_EXPECTED[f.kind]}' ELSE '' END"
        for f in fields
    )
    range_detail = names(lambda f: low(f), bounded) if bounded else "''"
    minimums = ", ".join(f"{f.label} >= {f.minimum}" for f in bounded)
    columns = ", ".join(
        f"CASE WHEN reason IS NULL THEN CAST(round({f.name}) AS BIGINT) END AS {f.name}"
        if f.kind == "time"
        else f.name
        for f in fields
    )
    return f"""
WITH decoded AS (
    SELECT line, octet_length(raw) AS nbytes,
           CASE WHEN octet_length(raw) <= $max THEN try(decode(raw)) END AS text
    FROM batch
),
parsed AS (
    SELECT line, nbytes, text, try(json(text)) AS j FROM decoded
),
extracted AS (
    SELECT line, nbytes, text, j, json_type(j) AS t_root,
           CASE WHEN json_type(j) = 'OBJECT' THEN {values} END AS v
    FROM parsed
),
raw AS (
    SELECT *, {raw_cols} FROM extracted
),
typed AS (
    SELECT *, {typed} FROM raw
),
judged AS (
    SELECT *,
        CASE
            WHEN nbytes <= $max AND text IS NOT NULL AND trim(text, E' \\t\\r\\n') = ''
                THEN 'blank_line'
            WHEN nbytes > $max THEN 'line_too_long'
            WHEN text IS NULL THEN 'invalid_utf8'
            WHEN j IS NULL THEN 'invalid_json'
            WHEN t_root <> 'OBJECT' THEN 'not_an_object'
            WHEN {missing} THEN 'missing_field'
            WHEN {wrong} THEN 'wrong_type'
            WHEN {out_of_range} THEN 'out_of_range'
            WHEN {time_range} THEN 'timestamp_out_of_range'
{format_checks}
        END AS reason
    FROM typed
)
SELECT line, reason,
    CASE
        WHEN reason = 'blank_line' THEN 'the line holds only whitespace'
        WHEN reason = 'line_too_long' THEN format('{{}} bytes, limit {{}}', nbytes, $max)
        WHEN reason = 'invalid_utf8' THEN 'the line is not valid UTF-8'
        WHEN reason = 'invalid_json' THEN 'the line is not valid JSON'
        WHEN reason = 'not_an_object' THEN format('a JSON {{}}, expected an object', lower(t_root))
        WHEN reason = 'missing_field' THEN 'missing or null: ' || {names(absent, required)}
        WHEN reason = 'wrong_type'
            THEN trim(regexp_replace({wrong_detail}, '(; )+', '; ', 'g'), '; ')
        WHEN reason = 'out_of_range' AND ({out_of_range})
            THEN {range_detail} || ' out of range ({minimums})'
        WHEN reason = 'timestamp_out_of_range' THEN {names(unplausible, times) if times else "''"}
            || ' is not finite or lands outside 1970-01-01..2100-01-01 after its unit and --start'
{format_details}
    END AS detail,
    {columns}
FROM judged
"""

"""Validate and extract named fields of JSON lines, for formats whose field names come from
flags (``--tenant-field user``): the query is built from a list of :class:`Field` specs, so each
format states its fields and rules once and shares one rule chain.

Every line gets exactly one outcome: the values (``reason`` NULL) or the first rule it breaks:
blank_line, line_too_long, invalid_utf8, invalid_json, not_an_object, missing_field,
wrong_type, out_of_range, timestamp_out_of_range (a ``time`` field: not finite, or outside
1970-01-01..2100-01-01), then the format's own checks, in the order given. Messages name the
fields, never their values.

The SQL text is made of this module's and the formats' own words only: every path and every
field's name in a message (which come from flags) is a bound parameter (``$p0``, ``$p1``, …),
the path as its JSON Pointer (:mod:`prefixscope.ingest.formats.paths`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import duckdb
import pyarrow as pa

from prefixscope.ingest.formats.base import MAX_ARRIVAL_US, MIN_ARRIVAL_US
from prefixscope.ingest.formats.paths import ROOT, json_pointer, parse_path, show_path

Kind = Literal["integer", "number", "string", "id", "integer_array", "json", "object", "time"]

_INTEGER = r"-?[0-9]{1,18}"
_ARRAY = r"\[([0-9]{1,20}(,[0-9]{1,20})*)?\]"
#: An integer field holds at most 18 digits (BIGINT, with room): a number of this size or more
#: is out_of_range (naming the field), not a type the user never wrote.
_INTEGER_LIMIT = "1e18"
_LONG_ID = "an integer of at most 18 digits; write a longer one as a string"
_EXPECTED = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "id": "a string or an integer",
    "integer_array": "an array of non-negative integers",
    "json": "a JSON value",
    "object": "an object",
    "time": "a number or an ISO 8601 time",
}

__all__ = ["ROOT", "Check", "Field", "parse_fields"]


@dataclass(frozen=True)
class Field:
    """One field: output column ``name`` (this code's word), read at ``path`` (a field path,
    docs/ingest.md#field-paths: ``usage.prompt_tokens``; :data:`ROOT`, ``.``: the line
    itself)."""

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
    #: the line itself, taken only when the line has one of the top-level keys ``root_if``
    #: (not null).
    fallbacks: tuple[str, ...] = ()
    root_if: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return parse_path(self.path)

    @property
    def label(self) -> str:
        """How messages name the field: its path, and where else it was looked for."""

        def name(path: str) -> str:
            if path != ROOT:
                return show_path(parse_path(path))
            if not self.root_if:
                return "the line"
            keys = self.root_if
            return "top-level " + (
                keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " or " + keys[-1]
            )

        also = f" (or {' or '.join(map(name, self.fallbacks))})" if self.fallbacks else ""
        return name(self.path) + also


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
    query, params = _query(fields, checks)
    con.register("batch", batch)
    try:
        return con.sql(query, params={"max": max_line_bytes, **params}).to_arrow_table()
    finally:
        con.unregister("batch")


class _Params:
    """The parameters of one query: :meth:`bind` a value, put the name it returns in the SQL."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def bind(self, value: object) -> str:
        name = f"p{len(self.values)}"
        self.values[name] = value
        return f"${name}"


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
        "object": f"CASE WHEN {t} = 'OBJECT' THEN {v} END",
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


def _huge(f: Field) -> str:
    """SQL: the field is an integer kind holding a number too large for it (an integer of 19
    digits or more, ``1e30``, ``1e400``): out_of_range, whatever JSON type it parsed as."""
    if f.kind not in ("integer", "id"):
        return "false"
    v = f"raw_{f.name}"
    return (
        f"coalesce(json_type({v}) IN ('UBIGINT', 'BIGINT', 'DOUBLE') "
        f"AND NOT (abs(TRY_CAST({v}::VARCHAR AS DOUBLE)) < {_INTEGER_LIMIT}), false)"
    )


def _raw_columns(fields: Sequence[Field], p: _Params) -> tuple[str, list[str]]:
    """The JSON pointers to extract in one call (``v``, bound as one list), and each field's
    raw JSON value: its path, else the first of its fallbacks present on the line."""
    pointers: list[str] = []

    def slot(path: str) -> str:
        keys = parse_path(path)
        if not keys:
            return "j"
        pointers.append(json_pointer(keys))
        return f"v[{len(pointers)}]"

    columns = []
    for f in fields:
        main = slot(f.path)
        whens = []
        for alt in f.fallbacks:
            if alt == ROOT and f.root_if:
                wheres = [p.bind(json_pointer(parse_path(k))) for k in f.root_if]
                present = " OR ".join(_present(f"json_extract(j, {w})") for w in wheres)
                whens.append((f"({present})", "j"))
            else:
                v = slot(alt)
                whens.append((_present(v), v))
        if whens:
            cases = " ".join(f"WHEN {c} THEN {v}" for c, v in [(_present(main), main), *whens])
            main = f"CASE {cases} ELSE {main} END"
        columns.append(f"{main} AS raw_{f.name}")
    values = f"json_extract(j, {p.bind(pointers)}::VARCHAR[])" if pointers else "NULL"
    return values, columns


def _query(fields: Sequence[Field], checks: Sequence[Check]) -> tuple[str, dict[str, object]]:
    """The SQL of :func:`parse_fields` and its parameters (every path and label among them)."""
    p = _Params()
    values, raw = _raw_columns(fields, p)
    labels = {f.name: p.bind(f.label) for f in fields}
    raw_cols = ",\n           ".join(raw)
    typed = ",\n           ".join(f"{_value(f, f'raw_{f.name}')} AS {f.name}" for f in fields)

    def absent(f: Field) -> str:
        return f"(raw_{f.name} IS NULL OR json_type(raw_{f.name}) = 'NULL')"

    def mistyped(f: Field) -> str:
        bad = f"({f.name} IS NULL AND NOT {_huge(f)})"
        if f.kind == "integer_array":  # an element past 2**64 casts to NULL
            bad = f"({f.name} IS NULL OR list_count({f.name}) < len({f.name}))"
        return f"(NOT {absent(f)} AND {bad})"

    def low(f: Field) -> str:
        below = f"({f.name} < {f.minimum})" if f.minimum is not None else "false"
        return f"({below} OR (NOT {absent(f)} AND {_huge(f)}))"

    def names(cond, fs: Sequence[Field]) -> str:  # type: ignore[no-untyped-def]
        parts = ", ".join(f"CASE WHEN {cond(f)} THEN {labels[f.name]} END" for f in fs)
        return f"array_to_string(list_filter([{parts}], lambda x: x IS NOT NULL), ', ')"

    times = [f for f in fields if f.kind == "time"]

    def unplausible(f: Field) -> str:
        return (
            f"({f.name} IS NOT NULL AND (NOT isfinite({f.name}) OR {f.name} < {MIN_ARRIVAL_US} "
            f"OR {f.name} >= {MAX_ARRIVAL_US}))"
        )

    time_range = " OR ".join(unplausible(f) for f in times) or "false"
    required = [f for f in fields if f.required]
    bounded = [f for f in fields if f.minimum is not None or f.kind in ("integer", "id")]
    missing = " OR ".join(absent(f) for f in required) or "false"
    wrong = " OR ".join(mistyped(f) for f in fields) or "false"
    out_of_range = " OR ".join(low(f) for f in bounded) or "false"
    format_checks = "\n".join(f"            WHEN {c.bad} THEN '{c.reason}'" for c in checks)
    format_details = "\n".join(
        f"        WHEN reason = '{c.reason}' AND ({c.bad}) THEN {c.detail}" for c in checks
    )
    wrong_detail = " || '; ' || ".join(
        f"CASE WHEN {mistyped(f)} THEN {labels[f.name]} || ' is ' "
        f"|| coalesce(json_type(raw_{f.name}), '?') || ', expected {_EXPECTED[f.kind]}' ELSE '' END"
        for f in fields
    )

    def limit(f: Field) -> str:
        rules = [f"at least {f.minimum}"] if f.minimum is not None else []
        rules += {"integer": ["at most 18 digits"], "id": [_LONG_ID]}.get(f.kind, [])
        why = f"' is out of range ({', '.join(rules)})'"
        return f"CASE WHEN {low(f)} THEN {labels[f.name]} || {why} END"

    range_detail = (
        f"array_to_string(list_filter([{', '.join(map(limit, bounded))}], "
        "lambda x: x IS NOT NULL), '; ')"
        if bounded
        else "''"
    )
    columns = ", ".join(
        f"CASE WHEN reason IS NULL THEN CAST(round({f.name}) AS BIGINT) END AS {f.name}"
        if f.kind == "time"
        else f.name
        for f in fields
    )
    time_names = names(unplausible, times) if times else "''"
    return (
        f"""
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
        WHEN reason = 'out_of_range' AND ({out_of_range}) THEN {range_detail}
        WHEN reason = 'timestamp_out_of_range' THEN {time_names}
            || ' is not finite or lands outside 1970-01-01..2100-01-01 after its unit and --start'
{format_details}
    END AS detail,
    {columns}
FROM judged
""",
        p.values,
    )

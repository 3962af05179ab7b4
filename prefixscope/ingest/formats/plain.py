"""Mooncake's fast path: lines whose fields hold plain values, whatever else the lines carry.

DuckDB parses each line once into the minified JSON text of just the fields
(``mooncake_fast.sql``); a compiled pass then reads those texts, keeping a line only when every
value has a plain shape -- a timestamp of digits with at most one decimal point, lengths of
digits, ``hash_ids`` a flat array of integers of at most 19 digits, a tenant that is a string
without escapes or an integer -- and the line breaks no rule of ``mooncake.sql``. Each plain
shape is one that ``mooncake.sql`` reads with the type it requires, into the same value, so
every line kept here is accepted there with the same row; every other line is left to it, the
authority on what is rejected and why (``tests/test_ingest_extra_fields.py`` checks the two
agree on edge lines).
"""

from __future__ import annotations

import json

import duckdb
import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql
from prefixscope.ingest.formats.base import MAX_ARRIVAL_US, MIN_ARRIVAL_US, IngestOptions
from prefixscope.ingest.formats.paths import json_pointer, parse_path

#: The fields every Mooncake line has, read as their raw JSON by the fast path.
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
#: A field a line may have: its own block size (``prefixscope export`` writes it).
LINE_BLOCK_SIZE = "block_size"
#: Digits of a plain integer length, and of an id (under 10**19 < 2**64: never overflows).
_LENGTH_DIGITS = 15
_ID_DIGITS = 19


def fast_query(tenant_path: str | None) -> tuple[str, dict[str, object]] | None:
    """The fast path's SQL and its parameters: the ``json_transform`` structure (the four
    fields, the line's own ``block_size`` and, when a tenant is mapped, the top-level key of
    its path, each read as raw JSON) and where the tenant lies under that key (a JSON Pointer,
    ``$``: the key itself). None when the tenant path is the line itself, or its first key is
    one of those fields (compared
    without case: the structure's names must differ so): then every line takes the full rule
    chain. The path's keys are parameters, never SQL text."""
    structure: dict[str, object] = dict.fromkeys((*FIELDS, LINE_BLOCK_SIZE), "JSON")
    query = sql.load("ingest/mooncake_fast")
    if not tenant_path:  # one query either way: the tenant column is then NULL, never read
        params = {"structure": json.dumps(structure), "tenant_key": FIELDS[0]}
        return query, {**params, "tenant_rest": "$", "has_tenant": False}
    keys = parse_path(tenant_path)
    if not keys or keys[0].lower() in (*FIELDS, LINE_BLOCK_SIZE):
        return None
    structure[keys[0]] = "JSON"
    params = {
        "structure": json.dumps(structure),
        "tenant_key": keys[0],
        "tenant_rest": json_pointer(keys[1:]),
        "has_tenant": True,
    }
    return query, params


def plain_rows(
    con: duckdb.DuckDBPyConnection,
    batch: pa.Table,
    options: IngestOptions,
    block_size: int,
    query: tuple[str, dict[str, object]],
) -> pa.Table:
    """The accepted rows of the lines of ``batch`` (view-free: registers ``batch`` itself) that
    have plain values: columns line, arrival_ts, tenant, input_tokens, output_tokens,
    block_size, block_hashes. Lines not among them are for ``mooncake.sql`` to judge."""
    text, params = query
    con.register("batch", batch)
    try:
        raw = con.sql(
            text, params={**params, "max_line_bytes": options.max_line_bytes}
        ).to_arrow_table()
    finally:
        con.unregister("batch")
    raw = raw.combine_chunks()
    ok, ids_offsets, ids, lengths = _scan(
        *_buffers(raw["timestamp"]),
        *_buffers(raw["input_length"]),
        *_buffers(raw["output_length"]),
        *_buffers(raw["hash_ids"]),
    )
    input_tokens, output_tokens = lengths[:, 0], lengths[:, 1]
    # A row of -1 lengths failed its shape; the block count is the rule mooncake.sql checks.
    ok &= input_tokens > 0
    counts = np.diff(ids_offsets)
    upper = (input_tokens + block_size - 1) // block_size
    if options.full_blocks:  # full blocks, or those and one id for a partial tail (mooncake.sql)
        ok &= (counts == input_tokens // block_size) | (counts == upper)
    else:
        ok &= counts == upper
    # a line's own block size, when it says one, is the ingest's (else mooncake.sql refuses it)
    own = raw[LINE_BLOCK_SIZE]
    agree = pc.or_(pc.is_null(own), pc.is_in(own, pa.array(["null", str(block_size)])))
    ok &= np.asarray(agree.to_numpy(zero_copy_only=False), dtype=bool)
    ts = np.asarray(pc.cast(pc.if_else(pa.array(ok), raw["timestamp"], "0"), pa.float64()))
    # The same double arithmetic as mooncake.sql's range rule, so the same lines pass.
    at = float(options.start_us) + ts * 1000.0
    ok &= (at >= MIN_ARRIVAL_US) & (at < MAX_ARRIVAL_US)
    tenant = _tenants(raw["tenant"], options) if options.field("tenant") else None
    if tenant is not None:
        ok &= np.asarray(pc.is_valid(tenant))
    micros = _round_half_away(ts * 1000.0).astype(np.int64) + options.start_us
    n = int(ok.sum())
    columns = {
        "line": raw["line"].combine_chunks(),
        "arrival_ts": pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "tenant": tenant,
        "input_tokens": pa.array(input_tokens),
        "output_tokens": pa.array(output_tokens),
        "block_hashes": _blocks(ids_offsets, ids, input_tokens, block_size, options.full_blocks),
    }
    if n < len(ok):
        keep = pa.array(ok)
        columns = {k: v.filter(keep) for k, v in columns.items() if v is not None}
    if tenant is None:
        columns["tenant"] = pa.array([options.tenant] * n, pa.string())
    columns["block_size"] = pa.array(np.full(n, block_size, np.int32))
    if options.full_blocks:
        columns["last_token_rule"] = pa.array(np.ones(n, bool))
    return pa.table(columns)


def _blocks(
    offsets: np.ndarray, ids: np.ndarray, tokens: np.ndarray, block_size: int, full: bool
) -> pa.ListArray:
    """Each line's ids as its blocks; with ``full`` (full blocks only), a last id that names a
    partial tail (one past ``tokens // block_size``) is left out: it names no hashed block."""
    if not full or len(tokens) == 0:
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), ids)
    counts = np.diff(offsets)
    keep_n = np.minimum(counts, np.maximum(tokens, 0) // block_size)
    # each row keeps its first keep_n ids (a rejected row's are filtered out later anyway)
    position = np.arange(len(ids)) - np.repeat(offsets[:-1], counts)
    keep = position < np.repeat(keep_n, counts)
    new_offsets = np.concatenate(([0], np.cumsum(keep_n))).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(new_offsets), pa.array(np.asarray(ids)[keep]))


def _buffers(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The offsets and bytes of a string column without nulls, as numpy arrays."""
    array = column.chunk(0) if column.num_chunks else pa.array([], pa.string())
    array = array.cast(pa.large_string()) if array.type != pa.large_string() else array
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, np.int64, len(array) + 1, array.offset * 8)
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(1, np.uint8)
    return offsets, data


def _tenants(column: pa.ChunkedArray, options: IngestOptions) -> pa.Array:
    """The tenant of each row from its raw JSON: a string without escapes (its text), or an
    integer of at most 18 digits (its digits, as mooncake.sql writes them); NULL otherwise, for
    mooncake.sql to judge (an escaped string, another type, missing)."""
    raw = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
    quoted = pc.and_(pc.starts_with(raw, '"'), pc.invert(pc.match_substring(raw, "\\")))
    integer = pc.match_substring_regex(raw, r"^-?[0-9]{1,18}$")
    text = pc.utf8_slice_codeunits(raw, 1, -1)
    empty = pa.scalar(None, pa.string())
    return pc.if_else(quoted, text, pc.if_else(integer, raw, empty))


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """DuckDB's round() of non-negative doubles: halves away from zero (not to even)."""
    down = np.floor(x)
    return np.where(x - down >= 0.5, down + 1.0, down)


@numba.njit(cache=True, nogil=True)
def _digits(data, start, end, most):  # type: ignore[no-untyped-def]
    """The value of ``data[start:end]`` when it is 1..``most`` ASCII digits, else -1."""
    if end <= start or end - start > most:
        return -1
    v = 0
    for p in range(start, end):
        c = data[p] - 48
        if c < 0 or c > 9:
            return -1
        v = v * 10 + c
    return v


@numba.njit(cache=True, nogil=True)
def _plain_time(data, start, end):  # type: ignore[no-untyped-def]
    """``data[start:end]`` is 1..15 digits, then maybe a point and 1..9 digits."""
    dot = end
    for p in range(start, end):
        if data[p] == 46:  # '.'
            dot = p
            break
    if _digits(data, start, dot, _LENGTH_DIGITS) < 0:
        return False
    return dot == end or (end - dot - 1 <= 9 and _digits(data, dot + 1, end, 9) >= 0)


@numba.njit(cache=True, nogil=True)
def _scan(t_off, t_data, i_off, i_data, o_off, o_data, h_off, h_data):  # type: ignore[no-untyped-def]
    """Per row: whether the timestamp, the two lengths and the ids all have their plain shape;
    the ids as CSR (a row that fails keeps none); the lengths (-1 where a shape fails)."""
    n = t_off.size - 1
    ok = np.zeros(n, np.bool_)
    lengths = np.full((n, 2), -1, np.int64)
    counts = np.zeros(n, np.int64)
    for r in range(n):
        a, b = h_off[r], h_off[r + 1]
        if b - a < 3 or h_data[a] != 91 or h_data[b - 1] != 93:  # '[' ... ']', not empty
            continue
        items = 1
        run = 0
        good = True
        for p in range(a + 1, b - 1):
            c = h_data[p]
            if c == 44:  # ','
                if run == 0:
                    good = False
                    break
                items += 1
                run = 0
            elif 48 <= c <= 57 and run < _ID_DIGITS:
                run += 1
            else:
                good = False
                break
        if not good or run == 0:
            continue
        inp = _digits(i_data, i_off[r], i_off[r + 1], _LENGTH_DIGITS)
        out = _digits(o_data, o_off[r], o_off[r + 1], _LENGTH_DIGITS)
        if inp < 0 or out < 0 or not _plain_time(t_data, t_off[r], t_off[r + 1]):
            continue
        ok[r] = True
        counts[r] = items
        lengths[r, 0] = inp
        lengths[r, 1] = out
    offsets = np.zeros(n + 1, np.int64)
    for r in range(n):
        offsets[r + 1] = offsets[r] + counts[r]
    ids = np.empty(offsets[n], np.uint64)
    for r in range(n):
        if not ok[r]:
            continue
        k = offsets[r]
        v = np.uint64(0)
        for p in range(h_off[r] + 1, h_off[r + 1]):
            c = h_data[p]
            if c == 44 or c == 93:
                ids[k] = v
                k += 1
                v = np.uint64(0)
            else:
                v = v * np.uint64(10) + np.uint64(c - 48)
    return ok, offsets, ids, lengths

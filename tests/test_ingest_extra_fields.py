"""Hash-id logs as real logs write them: extra fields of any kind take the fast path and change
no row; --tenant-field reads each line's tenant (mooncake, bailian); bad tenants are rejects."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from prefixscope import sql, warehouse
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.ingest.formats import mooncake, plain
from prefixscope.ingest.formats.mooncake import Mooncake
from prefixscope.ingest.formats.plain import fast_query
from prefixscope.ingest.lines import FileReadState, read_line_batches
from tests.conftest import mooncake_line


def ingest(con, paths, fmt="mooncake", **options):  # type: ignore[no-untyped-def]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        return ingest_files(con, paths, fmt, IngestOptions(**options), run_id)


def rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute(
        "SELECT source.line, arrival_ts, tenant, input_tokens, output_tokens, block_hashes "
        "FROM requests ORDER BY source.line"
    ).fetchall()


def with_extra(line: str, extra: dict, first: bool = False) -> str:
    """``line`` with the fields of ``extra`` added after (or before) its own."""
    fields = json.loads(line)
    return json.dumps({**extra, **fields} if first else {**fields, **extra})


#: Extra fields of every JSON kind, as gateways and exporters add them.
EXTRA = {
    "string": {"model": "kimi-k2"},
    "escaped string": {"note": 'say "hi" \\ caf\u00e9 \U0001f600 \n'},
    "integer": {"priority": -3},
    "float": {"score": 0.25e-3},
    "bool and null": {"stream": True, "cached": None},
    "nested object": {"meta": {"region": "eu", "tags": ["a", "b"], "deep": {"x": [1, {"y": 2}]}}},
    "array": {"extra_ids": [1, -2, 3.5, "x", None, [4]]},
    "same names nested": {"meta": {"timestamp": "x", "hash_ids": "no", "input_length": -1}},
    "empty containers": {"o": {}, "a": []},
}


@pytest.fixture
def loaded_sql(monkeypatch):  # type: ignore[no-untyped-def]
    """The names of the SQL files loaded while the test runs."""
    names: list[str] = []
    load = sql.load

    def spy(name: str) -> str:
        names.append(name)
        return load(name)

    monkeypatch.setattr(mooncake.sql, "load", spy)
    return names


def plain_lines(n: int = 6) -> list[str]:
    return [mooncake_line(timestamp=i * 5, input_length=600 + 300 * i) for i in range(n)]


@pytest.mark.parametrize("first", [False, True], ids=["after", "before"])
@pytest.mark.parametrize("kind", list(EXTRA))
def test_extra_fields_take_the_fast_path_and_change_no_row(
    wh, tmp_path, write_lines, loaded_sql, kind: str, first: bool
) -> None:
    _, con = wh
    canonical = plain_lines()
    ingest(con, [write_lines(canonical)])
    expected = rows(con)
    con.execute("DELETE FROM requests")
    del loaded_sql[:]
    result = ingest(con, [write_lines([with_extra(x, EXTRA[kind], first) for x in canonical])])
    assert (result.lines, result.accepted, result.rejected) == (6, 6, 0)
    assert rows(con) == expected
    assert "ingest/mooncake" not in loaded_sql  # the full rule chain never ran


def test_every_kind_of_extra_field_at_once_with_a_tenant_field(wh, write_lines, loaded_sql) -> None:
    _, con = wh
    extra = {k: v for e in EXTRA.values() for k, v in e.items()}
    lines = [with_extra(x, {**extra, "tenant": f"t{i % 2}"}) for i, x in enumerate(plain_lines())]
    result = ingest(con, [write_lines(lines)], fields=(("tenant", "tenant"),))
    assert (result.lines, result.accepted, result.rejected) == (6, 6, 0)
    assert [r[2] for r in rows(con)] == ["t0", "t1"] * 3
    assert "ingest/mooncake" not in loaded_sql


# Lines at the edge of the fast path's shapes: each must come out exactly as the full rule chain
# alone makes it (accepted with the same values, or rejected with the same reason and message).
EDGE = [
    '{"timestamp": 1, "timestamp": 2, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"time\\u0073tamp": 7, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"Timestamp": 7, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 1.50, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 1e3, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 0.0001234, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 12345678901234567, "input_length": 600, "output_length": 1, "hash_ids": [1]}',
    '{"timestamp": 1, "input_length": 600.0, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 1, "input_length": 6e2, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1.0, 2]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, "2"]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [18446744073709551615]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [18446744073709551616]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [ 1 ,\t2 ] , "x": 1 }',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2],}',
    '{"timestamp": NaN, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": true, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": "1", "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]} {"a": 1}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2], "n": "\\ud800"}',
    '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [], "x": []}',
    '{"timestamp": 4102444800000, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    '[{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}]',
]
TENANTS = ['"acme"', '"caf\\u00e9 \\"x\\""', '""', "42", "-7", "4.5", "1e2", "true", "null",
           '{"id": 1}', '["a"]', "123456789012345678901"]  # fmt: skip


def edge_lines() -> list[bytes]:
    good = mooncake_line(timestamp=3)[:-1]
    lines = [*EDGE]
    for t in TENANTS:
        lines += [f'{good}, "tenant": {t}}}', f'{good}, "meta": {{"user": {t}}}}}']
    return [*(x.encode() for x in lines), b'{"timestamp": 1, "note": "\xff"}', b"  ", b"{"]


@pytest.mark.parametrize("tenant_path", [None, "tenant", "meta.user", "hash_ids.x", "."])
def test_the_fast_path_agrees_with_the_full_rule_chain(
    write_lines, monkeypatch, tenant_path
) -> None:
    path = write_lines(edge_lines())
    options = IngestOptions(fields=(("tenant", tenant_path),) if tenant_path else ())
    batch = next(read_line_batches(path, FileReadState())).table
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    both = Mooncake().parse(con, batch, options)
    monkeypatch.setattr(plain, "fast_query", lambda _: None)
    alone = Mooncake().parse(con, batch, options)
    assert both.num_rows == alone.num_rows == batch.num_rows
    assert both.to_pylist() == alone.to_pylist()
    accepted = pa.compute.sum(pa.compute.is_null(both["reason"])).as_py()
    assert accepted >= 5 if tenant_path in (None, "tenant", "meta.user") else accepted == 0


def test_the_fast_query_needs_no_rule_chain_for_a_tenant_of_its_own() -> None:
    assert fast_query("tenant") is not None and fast_query("meta.user") is not None
    # a tenant inside one of the four fields, or the line itself: every line takes the chain
    assert fast_query("hash_ids.x") is None and fast_query(".") is None


# --- --tenant-field on the hash-id formats --------------------------------------------------

BAD_TENANTS = [
    ("missing_field", None, "missing or null: meta.user"),
    ("missing_field", "null", "missing or null: meta.user"),
    ("wrong_type", "4.5", "meta.user is DOUBLE, expected a string or an integer"),
    ("wrong_type", "true", "meta.user is BOOLEAN, expected a string or an integer"),
    ("wrong_type", '{"id": 1}', "meta.user is OBJECT, expected a string or an integer"),
    ("wrong_type", '["a"]', "meta.user is ARRAY, expected a string or an integer"),
]


def tenant_line(value: str | None, fmt: str, i: int = 0) -> str:
    line = mooncake_line(timestamp=i)[:-1] if fmt == "mooncake" else bailian_line(i)[:-1]
    return line + ("" if value is None else f', "meta": {{"user": {value}}}') + "}"


def bailian_line(i: int) -> str:
    return json.dumps(
        {"chat_id": i, "parent_chat_id": -1, "timestamp": i, "input_length": 40,
         "output_length": 5, "type": "text", "turn": 1, "hash_ids": [i, 1, 2]}
    )  # fmt: skip


@pytest.mark.parametrize("fmt", ["mooncake", "bailian"])
def test_tenant_field_reads_each_lines_tenant(wh, write_lines, fmt: str) -> None:
    _, con = wh
    values = ['"acme"', '"globex"', "42", '"acme"']
    path = write_lines([tenant_line(v, fmt, i) for i, v in enumerate(values)])
    result = ingest(con, [path], fmt, fields=(("tenant", "meta.user"),), tenant="ignored")
    assert (result.lines, result.accepted, result.rejected) == (4, 4, 0)
    assert [r[2] for r in rows(con)] == ["acme", "globex", "42", "acme"]


@pytest.mark.parametrize("fmt", ["mooncake", "bailian"])
@pytest.mark.parametrize(("reason", "value", "detail"), BAD_TENANTS)
def test_a_bad_tenant_is_a_reject_and_the_counts_add_up(
    wh, write_lines, fmt: str, reason: str, value: str | None, detail: str
) -> None:
    _, con = wh
    lines = [tenant_line('"acme"', fmt, 0), tenant_line(value, fmt, 1), tenant_line("7", fmt, 2)]
    result = ingest(con, [write_lines(lines)], fmt, fields=(("tenant", "meta.user"),))
    assert (result.lines, result.accepted, result.rejected) == (3, 2, 1)
    got = con.execute("SELECT source.line, reason, detail FROM rejects").fetchall()
    assert got == [(2, reason, detail)]
    assert [r[2] for r in rows(con)] == ["acme", "7"]
    written = con.execute("SELECT (SELECT count(*) FROM requests) + (SELECT count(*) FROM rejects)")
    assert written.fetchone()[0] == result.lines


def test_without_a_tenant_field_an_extra_tenant_is_ignored(wh, write_lines) -> None:
    _, con = wh
    path = write_lines([with_extra(x, {"tenant": {"not": "a string"}}) for x in plain_lines(2)])
    result = ingest(con, [path], tenant="fleet")
    assert result.accepted == 2 and [r[2] for r in rows(con)] == ["fleet", "fleet"]


def test_bailian_takes_one_tenant_source_only(wh, write_lines) -> None:
    _, con = wh
    path = write_lines([tenant_line('"acme"', "bailian")])
    with pytest.raises(ValueError, match="--tenant-field or --tenant-from"):
        ingest(con, [path], "bailian", fields=(("tenant", "meta.user"),), tenant_from="type")
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 0


def test_the_command_ingests_a_multi_tenant_hash_id_log(tmp_path: Path, capsys) -> None:
    path = tmp_path / "fleet.jsonl"
    lines = [with_extra(x, {"tenant": f"t{i % 3:02d}"}) for i, x in enumerate(plain_lines(9))]
    path.write_text("\n".join([*lines, with_extra(plain_lines(1)[0], {"tenant": 1.5})]) + "\n")
    db = tmp_path / "wh.duckdb"
    argv = ["ingest", "--format", "mooncake", "--input", str(path), "--warehouse", str(db)]
    assert main([*argv, "--tenant-field", "tenant", "--pseudonymize-tenants", "k"]) == 0
    assert "10 lines = 9 accepted + 1 rejected" in capsys.readouterr().out
    con = duckdb.connect(str(db), read_only=True)
    tenants = con.execute("SELECT tenant, count(*) FROM requests GROUP BY ALL").fetchall()
    con.close()
    assert sorted(n for _, n in tenants) == [3, 3, 3]
    assert all(t.startswith("t-") and len(t) == 18 for t, _ in tenants)

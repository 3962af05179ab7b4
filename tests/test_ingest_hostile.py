"""Ingest under a hostile user (issue 24): no field path, tenant name or file can make ingest
evaluate SQL, print a traceback or publish a file of nothing but rejects.

- field paths are data: parsed into keys, bound as JSON Pointers; a key holding quotes,
  backslashes, brackets, dots, SQL words or any script reads that key, and a path that does not
  parse is one line (exit 2), before any warehouse is made;
- tenant names from lines break the rule -> ``invalid_tenant``; ``--tenant`` is refused;
- causes named by field: a missing prompt, numbers too large for their field;
- a file of which no line is accepted stops, naming the commonest reason and any field flag
  found on no line; a missing input leaves no warehouse behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.cli import main
from prefixscope.ingest import FORMATS, IngestOptions, ingest_files
from prefixscope.ingest.formats.paths import (
    MAX_PATH_CHARS,
    PathError,
    json_pointer,
    parse_path,
    show_path,
)
from prefixscope.ingest.loader import FormatMismatch

TOKENS = list(range(1, 21))


def ingest(con, paths, fmt="tokens", **options):  # type: ignore[no-untyped-def]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        return ingest_files(con, [str(p) for p in paths], fmt, IngestOptions(**options), run_id)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    code = main(["ingest", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def nest(keys: tuple[str, ...], value: object) -> object:
    """``value`` at ``keys``: {k0: {k1: value}}."""
    for key in reversed(keys):
        value = {key: value}
    return value


def line(fmt: str, i: int = 0, /, **extra: object) -> dict[str, object]:
    """A line ``fmt`` accepts (tenant from ``extra`` when a tenant field is mapped)."""
    base: dict[str, object] = {
        "tokens": {"timestamp": i, "token_ids": TOKENS},
        "mooncake": {"timestamp": i, "input_length": 600, "output_length": 1, "hash_ids": [i, 9]},
        "bailian": {
            "chat_id": i, "parent_chat_id": -1, "timestamp": i, "input_length": 32,
            "output_length": 1, "type": "text", "turn": 1, "hash_ids": [i, 7],
        },
        "openai": {
            "timestamp": i,
            "request": {"messages": [{"role": "user", "content": f"hello {i}"}]},
            "response": {"id": f"r-{i}"},
        },
    }[fmt]  # fmt: skip
    return {**base, **extra}


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def parse_one(fmt: str, rows: list[object], **options: object) -> pa.Table:
    """The stage rows ``fmt`` gives for ``rows``, parsed in process (no warehouse)."""
    raw = pa.array([json.dumps(r).encode() for r in rows], pa.large_binary())
    batch = pa.table({"line": pa.array(range(1, len(rows) + 1), pa.int64()), "raw": raw})
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    try:
        return FORMATS[fmt].parse(con, batch, IngestOptions(**options))  # type: ignore[arg-type]
    finally:
        con.close()


# --- the path syntax --------------------------------------------------------------------------

PATHS = [
    ("user", ("user",)),
    ("meta.user", ("meta", "user")),
    ("user' || '", ("user' || '",)),  # quotes and SQL are plain key text
    ("'; DROP TABLE requests; --", ("'; DROP TABLE requests; --",)),
    ("x`y\\z", ("x`y\\z",)),
    ("select.from", ("select", "from")),
    ("ключ.用户", ("ключ", "用户")),
    ('meta["a.b"]', ("meta", "a.b")),
    ('["x\\"y"]', ('x"y',)),
    ('["[a]"]["b"].c', ("[a]", "b", "c")),
    ('["tab\\there"]', ("tab\there",)),
    ("a~b/c", ("a~b/c",)),
    (".", ()),
]
BAD_PATHS = [
    ("", "empty"),
    ("a.", "empty key at the end"),
    (".a", "empty key"),
    ("a..b", "empty key at character 3"),
    ('a.["b"]', "dot before a bracket"),
    ("a[0]", "double quotes"),
    ("a['b']", "double quotes"),
    ('a["b"', "not closed"),
    ('a["b"]c', "unexpected 'c'"),
    ('a"b', "unexpected '\"'"),
    ("a]b", "unexpected ']'"),
    ("a\nb", "control character"),
    ('[""]', "empty key"),
    ('["\\q"]', "not a JSON string"),
    ("x" * (MAX_PATH_CHARS + 1), "longer than"),
    ("a." * 5_000, "longer than"),
]


@pytest.mark.parametrize(("text", "keys"), PATHS)
def test_a_path_parses_into_its_keys_and_shows_back(text: str, keys: tuple[str, ...]) -> None:
    assert parse_path(text) == keys
    assert parse_path(show_path(keys)) == keys


@pytest.mark.parametrize(("text", "problem"), BAD_PATHS, ids=[b[1] for b in BAD_PATHS])
def test_a_path_that_does_not_parse_is_one_line(text: str, problem: str) -> None:
    with pytest.raises(PathError, match="--tenant-field") as info:
        parse_path(text, "--tenant-field")
    message = str(info.value)
    assert problem in message and "\n" not in message and len(message) < 400


def test_a_json_pointer_escapes_tilde_and_slash() -> None:
    assert json_pointer(("a~b/c", "d")) == "/a~0b~1c/d"
    assert json_pointer(()) == "$"


KEYS = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4).map(tuple)


@given(KEYS)
def test_every_key_tuple_shows_as_a_path_that_reads_back(keys: tuple[str, ...]) -> None:
    shown = show_path(keys)
    assert parse_path(shown) == keys
    assert shown.isprintable()


# --- paths are read as data, never evaluated --------------------------------------------------

#: Top-level keys the lines of these tests use besides the format's own (decoys, fallbacks).
RESERVED = {"user", "user' || '", "id", "usage", "messages", "startTime", "prompt"}
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="'\"`\\.[]$/~ ;-|()ab", max_size=30),
    st.sampled_from([p for p, _ in PATHS] + [p for p, _ in BAD_PATHS]),
)


@pytest.mark.parametrize("fmt", ["tokens", "mooncake", "openai", "bailian"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=HOSTILE)
def test_any_tenant_path_reads_its_key_or_is_refused_in_one_line(fmt: str, path: str) -> None:
    try:
        keys = parse_path(path)
    except PathError:
        with pytest.raises(PathError) as info:
            IngestOptions(fields=(("tenant", path),))
        assert "\n" not in str(info.value)
        return
    if not keys or keys[0] in {*line(fmt), *RESERVED}:
        return  # the line itself, or inside a field the format reads: not a tenant's place
    present = line(fmt, 1, **nest(keys, "t-1"))  # type: ignore[arg-type]
    decoy = line(fmt, 2, user="decoy", **{"user' || '": "decoy"})
    rows = parse_one(fmt, [present, decoy], fields=(("tenant", path),))
    assert rows["reason"].to_pylist() == [None, "missing_field"]
    assert rows["tenant"].to_pylist()[0] == "t-1"


@pytest.mark.parametrize("fmt", ["tokens", "openai", "mooncake"])
@pytest.mark.parametrize("path", [p for p, keys in PATHS if keys])
def test_a_hostile_tenant_path_is_read_by_the_command(tmp_path, capsys, fmt, path) -> None:
    keys = parse_path(path)
    decoys = {"user": "decoy", "user' || '": "decoy", **nest(keys, "t-2")}  # type: ignore[dict-item]
    rows = [line(fmt, 1, **nest(keys, "t-1")), line(fmt, 2, **decoys)]  # type: ignore[arg-type]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    db = tmp_path / "wh.duckdb"
    argv = ["--format", fmt, "--input", str(log), "--warehouse", str(db), "--tenant-field", path]
    code, _, err = run_cli(capsys, *argv)
    assert (code, err) == (0, "")
    with duckdb.connect(str(db), read_only=True) as con:
        tenants = con.execute("SELECT tenant FROM requests ORDER BY arrival_ts").fetchall()
    assert tenants == [("t-1",), ("t-2",)]


@pytest.mark.parametrize(("path", "problem"), BAD_PATHS[:12], ids=[b[1] for b in BAD_PATHS[:12]])
@pytest.mark.parametrize("flag", ["--tenant-field", "--session-field", "--timestamp-field"])
def test_a_bad_path_stops_the_command_before_any_warehouse(
    tmp_path, capsys, flag, path, problem
) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", [line("tokens")])
    db = tmp_path / "wh.duckdb"
    argv = ["--format", "tokens", "--input", str(log), "--warehouse", str(db), flag, path]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"error: {flag}" in err and problem.split("'")[0] in err
    assert "warehouse refused" not in err and not db.exists()


def test_a_key_named_like_sql_is_read_in_a_parquet_file(wh, tmp_path) -> None:
    _, con = wh
    path = tmp_path / "t.parquet"
    table = pa.table(
        {
            'ids" FROM batch; --': [TOKENS, TOKENS],
            "timestamp": [1.0, 2.0],
            "meta": [{"a.b": "acme"}, {"a.b": "globex"}],
        }
    )
    pq.write_table(table, path)
    fields = (("token", '["ids\\" FROM batch; --"]'), ("tenant", 'meta["a.b"]'))
    result = ingest(con, [path], fields=fields)
    assert (result.accepted, result.rejected) == (2, 0)
    tenants = con.execute("SELECT tenant FROM requests ORDER BY arrival_ts").fetchall()
    assert tenants == [("acme",), ("globex",)]


def test_a_parquet_path_to_no_column_is_one_error(wh, tmp_path) -> None:
    _, con = wh
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"token_ids": [TOKENS], "timestamp": [1.0]}), path)
    with pytest.raises(ValueError, match=r"no column meta\.user — map columns"):
        ingest(con, [path], fields=(("tenant", "meta.user"),))


# --- tenant names -----------------------------------------------------------------------------

BAD_TENANTS = [
    ("empty", "", "empty"),
    ("blank", "   ", "empty"),
    ("newline", "a\nb", "control"),
    ("too_long", "x" * 257, "longer than 256"),
    ("fleet", "*", "fleet"),
]


@pytest.mark.parametrize("fmt", ["tokens", "openai", "mooncake", "bailian"])
@pytest.mark.parametrize(("case", "name", "problem"), BAD_TENANTS, ids=[b[0] for b in BAD_TENANTS])
@pytest.mark.parametrize("pseudonyms", [None, "key"], ids=["names", "pseudonyms"])
def test_a_line_whose_tenant_breaks_the_rule_is_invalid_tenant(
    wh, tmp_path, fmt, case, name, problem, pseudonyms
) -> None:
    _, con = wh
    rows = [line(fmt, 1, tenant="acme"), line(fmt, 2, tenant=name), line(fmt, 3, tenant="x" * 256)]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    result = ingest(con, [log], fmt, fields=(("tenant", "tenant"),), pseudonymize_key=pseudonyms)
    assert (result.lines, result.accepted, result.rejected) == (3, 2, 1)
    reason, detail = con.execute("SELECT reason, detail FROM rejects").fetchone()  # type: ignore[misc]
    assert reason == "invalid_tenant" and problem in detail and "tenant" in detail
    if name.strip():
        assert name not in detail.replace("'*'", "")  # never the value (the rule names '*')
    tenants = {t for (t,) in con.execute("SELECT tenant FROM requests").fetchall()}
    assert ("acme" in tenants) is (pseudonyms is None) and "*" not in tenants


def test_a_bailian_type_that_breaks_the_rule_is_invalid_tenant(wh, tmp_path) -> None:
    _, con = wh
    rows = [line("bailian", 1), line("bailian", 2, type="*")]
    result = ingest(con, [write_jsonl(tmp_path / "b.jsonl", rows)], "bailian", tenant_from="type")
    assert (result.accepted, result.rejected) == (1, 1)
    assert con.execute("SELECT reason FROM rejects").fetchone() == ("invalid_tenant",)


@pytest.mark.parametrize("fmt", ["tokens", "openai", "mooncake", "bailian"])
@pytest.mark.parametrize("number", [str(2**70), "1e30", "-" + str(10**19)])
def test_a_tenant_too_large_a_number_is_out_of_range_naming_it(wh, tmp_path, fmt, number) -> None:
    _, con = wh
    good = json.dumps(line(fmt, 1, meta={"user": 12}))
    bad = json.dumps(line(fmt, 2, meta={"user": 0})).replace('"user": 0', f'"user": {number}')
    log = tmp_path / "log.jsonl"
    log.write_text(f"{good}\n{bad}\n")
    result = ingest(con, [log], fmt, fields=(("tenant", "meta.user"),))
    assert (result.accepted, result.rejected) == (1, 1)
    reason, detail = con.execute("SELECT reason, detail FROM rejects").fetchone()  # type: ignore[misc]
    assert reason == "out_of_range" and detail.startswith("meta.user is out of range")
    assert "DOUBLE" not in detail and "18 digits" in detail
    assert con.execute("SELECT tenant FROM requests").fetchall() == [("12",)]


@pytest.mark.parametrize("name", ["", "   ", "a\nb", "x" * 257, "*"])
def test_a_bad_tenant_flag_is_refused_before_any_warehouse(tmp_path, capsys, name) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", [line("tokens")])
    db = tmp_path / "wh.duckdb"
    argv = ["--format", "tokens", "--input", str(log), "--warehouse", str(db), "--tenant", name]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "not a valid tenant name" in err
    assert not db.exists()


def test_ingest_options_refuse_a_bad_tenant_too() -> None:
    with pytest.raises(ValueError, match="--tenant '\\*' is not a valid tenant name"):
        IngestOptions(tenant="*")


# --- causes named by field --------------------------------------------------------------------

CACHED = "response.usage.prompt_tokens_details.cached_tokens"
CACHED_CASES = [
    ("ten_to_30_digits", str(10**30), "out_of_range", f"{CACHED} (or"),
    ("ten_to_30_exponent", "1e30", "out_of_range", f"{CACHED} (or"),
    ("infinite", "1e400", "out_of_range", f"{CACHED} (or"),
    ("negative", "-3", "out_of_range", f"{CACHED} (or"),
    ("fraction", "2.5", "wrong_type", f"{CACHED} (or"),
    ("string", '"7"', "wrong_type", f"{CACHED} (or"),
]


@pytest.mark.parametrize(
    ("case", "raw", "reason", "starts"), CACHED_CASES, ids=[c[0] for c in CACHED_CASES]
)
def test_a_reported_cached_count_that_is_no_count_names_its_field(
    wh, tmp_path, case, raw, reason, starts
) -> None:
    _, con = wh
    usage = {"prompt_tokens_details": {"cached_tokens": 0}}
    good = line("openai", 1)
    bad = line("openai", 2, response={"id": "r-2", "usage": usage})
    text = json.dumps(bad).replace('"cached_tokens": 0', f'"cached_tokens": {raw}')
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(good) + "\n" + text + "\n")
    result = ingest(con, [log], "openai")
    assert (result.accepted, result.rejected) == (1, 1)
    got = con.execute("SELECT reason, detail FROM rejects").fetchone()
    assert got[0] == reason and got[1].startswith(starts)  # type: ignore[index]


BODIES = [
    ("no_prompt", {"request": {"model": "m"}}, {}, "missing_field",
     "missing or null: request.messages or request.input or request.prompt"),
    ("wrong_request_field", {}, {"request": "response"}, "missing_field",
     "missing or null: response.messages or response.input or response.prompt"),
    ("request_not_an_object", {"request": ["a"]}, {}, "wrong_type",
     "request (or top-level messages, input, prompt_token_ids, input_ids, prompt, text or "
     "proxy_server_request) is ARRAY, expected an object"),
    ("messages_not_a_list", {"request": {"messages": "hi"}}, {}, "wrong_type",
     "request.messages is VARCHAR, expected an array"),
    ("message_without_role", {"request": {"messages": [{"content": "x"}]}}, {}, "missing_field",
     "missing or null: request.messages.0.role"),
    ("prompt_not_a_string", {"request": {"prompt": 5}}, {}, "wrong_type",
     "request.prompt is BIGINT, expected a string"),
    ("dotted_request_field", {"a.b": {"x": 1}}, {"request": '["a.b"]'}, "missing_field",
     'missing or null: ["a.b"].messages or ["a.b"].input or ["a.b"].prompt'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "change", "fields", "reason", "detail"), BODIES, ids=[b[0] for b in BODIES]
)
def test_a_gateway_line_without_a_prompt_names_the_missing_field(
    case, change, fields, reason, detail
) -> None:
    good = line("openai", 1)
    if fields.get("request"):
        good[parse_path(fields["request"])[0]] = good["request"]
    rows = parse_one(
        "openai", [good, {**line("openai", 2), **change}], fields=tuple(fields.items())
    )
    assert rows["reason"].to_pylist() == [None, reason]
    assert rows["detail"].to_pylist()[1] == detail


# --- files of which no line is accepted -------------------------------------------------------

NONE_ACCEPTED = [
    ("mooncake", {}, [line("mooncake", i, hash_ids=[i]) for i in range(3)], "block_count_mismatch"),
    ("bailian", {}, [line("bailian", i, turn=0) for i in range(3)], "out_of_range"),
    ("tokens", {}, [line("tokens", i, token_ids=[]) for i in range(3)], "out_of_range"),
    ("openai", {}, [line("openai", i, timestamp=1e20) for i in range(3)], "timestamp_out_of_range"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "options", "rows", "reason"), NONE_ACCEPTED, ids=[n[0] for n in NONE_ACCEPTED]
)
def test_a_file_with_no_accepted_line_stops_and_writes_nothing(
    wh, tmp_path, fmt, options, rows, reason
) -> None:
    _, con = wh
    good = write_jsonl(tmp_path / "good.jsonl", [line(fmt, 10 + i) for i in range(2)])
    bad = write_jsonl(tmp_path / "bad.jsonl", rows)
    bad.write_text("\n" + bad.read_text())  # a blank line is not a request
    with pytest.raises(FormatMismatch) as info:
        ingest(con, [good, bad], fmt, **options)
    message = str(info.value)
    assert f"none of its 3 lines was accepted as {fmt}" in message
    assert f"most often: {reason}" in message and "\n" not in message
    assert con.execute("SELECT count(*) FROM requests").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM rejects").fetchone() == (0,)


@pytest.mark.parametrize("fmt", ["tokens", "openai", "mooncake", "bailian"])
def test_a_field_flag_found_on_no_line_is_named(tmp_path, capsys, fmt) -> None:
    log = write_jsonl(tmp_path / "log.jsonl", [line(fmt, i, tenant="a") for i in range(3)])
    db = tmp_path / "wh.duckdb"
    argv = ["--format", fmt, "--input", str(log), "--warehouse", str(db)]
    code, _, err = run_cli(capsys, *argv, "--tenant-field", "meta.tenant")
    assert code == 2 and err.count("\n") == 1
    assert "--tenant-field meta.tenant was found on no line" in err
    code, _, err = run_cli(capsys, *argv, "--tenant-field", "tenant")
    assert (code, err) == (0, "")


def test_an_empty_or_blank_file_is_still_zero_requests(wh, tmp_path) -> None:
    _, con = wh
    empty, blank = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl"
    empty.write_text("")
    blank.write_text("\n  \n")
    result = ingest(con, [empty, blank], "tokens")
    assert (result.lines, result.accepted, result.rejected) == (2, 0, 2)


# --- inputs that are not there ----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["tokens", "mooncake"])
def test_a_missing_input_leaves_no_warehouse(tmp_path, capsys, fmt) -> None:
    db = tmp_path / "wh.duckdb"
    argv = ["--format", fmt, "--input", str(tmp_path / "nope.jsonl"), "--warehouse", str(db)]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no such input file" in err and "nope.jsonl" in err and " — " in err
    assert not db.exists() and list(tmp_path.iterdir()) == []

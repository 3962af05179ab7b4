"""Ingest under hostile input (issue 12): bad timestamps in every format, byte-order marks,
inputs that are not files, all-or-nothing commands, inputs given twice, growing files,
re-ingests that would reject what was accepted, broken chat templates, and the one publish
transaction."""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prefixscope import warehouse
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.ingest import loader as loader_module
from prefixscope.ingest.loader import FormatMismatch
from prefixscope.stages import ingest as ingest_stage
from tests.conftest import mooncake_line


def ingest(con, paths, fmt="mooncake", **options):  # type: ignore[no-untyped-def]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        return ingest_files(con, [str(p) for p in paths], fmt, IngestOptions(**options), run_id)


def counts(con: duckdb.DuckDBPyConnection) -> tuple[int, int, int]:
    return con.execute(
        "SELECT (SELECT count(*) FROM requests), (SELECT count(*) FROM rejects), "
        "(SELECT count(*) FROM sources)"
    ).fetchone()  # type: ignore[return-value]


# --- one line per format, with the timestamp given as raw JSON text -------------------------

TOKENS = list(range(1, 21))


def line_of(fmt: str, ts: str, i: int) -> str:
    if fmt == "mooncake":
        return (
            f'{{"timestamp": {ts}, "input_length": 600, "output_length": 10, '
            f'"hash_ids": [{i}, {1000 + i}]}}'
        )
    if fmt == "bailian":
        return (
            f'{{"chat_id": {i}, "parent_chat_id": -1, "timestamp": {ts}, "input_length": 32, '
            f'"output_length": 5, "type": "text", "turn": 1, "hash_ids": [{i}, 7]}}'
        )
    if fmt == "tokens":
        return f'{{"timestamp": {ts}, "token_ids": {json.dumps(TOKENS)}}}'
    assert fmt == "openai"
    return (
        f'{{"timestamp": {ts}, "request": {{"messages": [{{"role": "user", '
        f'"content": "hello number {i}"}}]}}, "response": {{"id": "r-{i}"}}}}'
    )


FORMATS = ("mooncake", "bailian", "tokens", "openai")
# (case, timestamp as JSON text, expected reason per format: mooncake, bailian, tokens, openai)
BAD_TIMESTAMPS = [
    ("overflow_1e20", "1e20", ("timestamp_out_of_range",) * 4),
    ("overflow_2_63", str(2**63), ("timestamp_out_of_range",) * 4),
    ("overflow_2_64", str(2**64), ("timestamp_out_of_range",) * 4),
    ("infinite_1e400", "1e400", ("timestamp_out_of_range",) * 4),
    ("nan_literal", "NaN", ("timestamp_out_of_range",) * 4),
    (
        "negative_overflow",
        "-1e20",
        ("out_of_range", "out_of_range", "timestamp_out_of_range", "timestamp_out_of_range"),
    ),
    # epoch microseconds where milliseconds / seconds are documented: the year 50,000+
    ("epoch_us_in_ms_or_s_field", "1700000000000000", ("timestamp_out_of_range",) * 4),
    # an absolute epoch value (in range) in a trace of relative ones: far outside the file's span
    (
        "absolute_among_relative",
        "1700000000000",
        ("timestamp_implausible", *("timestamp_out_of_range",) * 3),
    ),
    # epoch seconds among relative values: in a milliseconds field that is 20 days, within the
    # spread rule's 1,000 hours, so kept (None); in a seconds field 54 years: implausible
    ("epoch_s_among_relative", "1700000000", (None, *("timestamp_implausible",) * 3)),
    (
        "string_inf",
        '"inf"',
        ("wrong_type", "wrong_type", "timestamp_out_of_range", "timestamp_out_of_range"),
    ),
    ("string_nan", '"NaN"', ("wrong_type",) * 4),
    (
        "iso_year_3000",
        '"3000-01-01T00:00:00Z"',
        ("wrong_type", "wrong_type", "timestamp_out_of_range", "timestamp_out_of_range"),
    ),
]


@pytest.mark.parametrize("fmt_index", range(len(FORMATS)), ids=FORMATS)
@pytest.mark.parametrize(
    ("case", "ts", "reasons"), BAD_TIMESTAMPS, ids=[c[0] for c in BAD_TIMESTAMPS]
)
def test_a_bad_timestamp_rejects_its_line_only(
    wh, write_lines, fmt_index: int, case: str, ts: str, reasons: tuple[str | None, ...]
) -> None:
    _, con = wh
    fmt = FORMATS[fmt_index]
    lines = [line_of(fmt, str(i), i) for i in range(10)]
    lines.insert(5, line_of(fmt, ts, 99))  # line 6
    path = write_lines(lines)
    result = ingest(con, [path], fmt)
    f = result.files[0]
    reason = reasons[fmt_index]
    expected = (11, 10, 1) if reason else (11, 11, 0)
    assert (f.lines, f.accepted, f.rejected) == expected
    assert f.accepted + f.rejected == f.lines
    src = con.execute("SELECT lines, accepted, rejected FROM sources").fetchone()
    assert src == expected
    rejects = con.execute("SELECT source.line, reason, detail FROM rejects").fetchall()
    if reason is None:
        assert rejects == []
        return
    assert [(line, r) for line, r, _ in rejects] == [(6, reason)]
    assert "1e20" not in rejects[0][2] and "1700000" not in rejects[0][2]  # never the value
    span = con.execute("SELECT max(arrival_ts) - min(arrival_ts) FROM requests").fetchone()[0]
    assert span.total_seconds() < 10  # nothing far away reached requests


@pytest.mark.parametrize(
    ("case", "values", "reason"),
    [
        ("overflow", [0.0, 1.0, 1e20, 2.0], "timestamp_out_of_range"),
        ("infinite", [0.0, 1.0, float("inf"), 2.0], "timestamp_out_of_range"),
        ("negative_overflow", [0.0, 1.0, -1e20, 2.0], "timestamp_out_of_range"),
        ("epoch_among_relative", [0.0, 1.0, 1.7e9, 2.0], "timestamp_implausible"),
    ],
)
def test_a_bad_parquet_timestamp_rejects_its_row_only(
    wh, tmp_path, case: str, values: list[float], reason: str
) -> None:
    _, con = wh
    path = tmp_path / f"{case}.parquet"
    table = pa.table(
        {"timestamp": values, "token_ids": [TOKENS] * len(values)},
    )
    pq.write_table(table, path)
    result = ingest(con, [path], "tokens")
    assert (result.lines, result.accepted, result.rejected) == (4, 3, 1)
    assert con.execute("SELECT source.line, reason FROM rejects").fetchall() == [(3, reason)]


# --- byte-order marks ------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_utf8_byte_order_mark_is_accepted(wh, write_lines, fmt: str, gz: bool) -> None:
    _, con = wh
    lines: list[str | bytes] = [line_of(fmt, str(i), i) for i in range(3)]
    lines[0] = b"\xef\xbb\xbf" + str(lines[0]).encode()
    result = ingest(con, [write_lines(lines, gz=gz)], fmt)
    assert (result.lines, result.accepted, result.rejected) == (3, 3, 0)


# --- inputs that are not log files -----------------------------------------------------------


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda tmp: Path("/dev/null"), "is a character device, not a log file"),
        (_fifo, r"is a FIFO \(named pipe\), not a log file"),
        (lambda tmp: tmp, "is a directory, not a log file"),
    ],
    ids=["dev_null", "fifo", "directory"],
)
def test_an_input_that_is_not_a_file_is_named_and_nothing_is_written(
    wh, tmp_path, write_lines, make: Callable[[Path], Path], kind: str
) -> None:
    _, con = wh
    good = write_lines([mooncake_line(timestamp=i) for i in range(3)])
    with pytest.raises(ValueError, match=kind) as info:
        ingest(con, [good, make(tmp_path)])
    assert "\n" not in str(info.value)
    assert counts(con) == (0, 0, 0)


# --- all or nothing per command --------------------------------------------------------------


def _mismatch(tmp_path: Path) -> Path:
    path = tmp_path / "other.jsonl"
    path.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(5)))
    return path


def _parquet(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"token_ids": [TOKENS]}), path)
    return path


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (_mismatch, FormatMismatch),
        (_parquet, FormatMismatch),
        (lambda tmp: tmp / "missing.jsonl", FileNotFoundError),
        (lambda tmp: tmp, ValueError),
        (_fifo, ValueError),
    ],
    ids=["format_mismatch", "parquet", "missing", "directory", "fifo"],
)
def test_a_bad_file_last_writes_nothing_and_the_run_fails(
    wh, tmp_path, write_lines, make: Callable[[Path], Path], error: type[Exception]
) -> None:
    path, con = wh
    before = [write_lines([mooncake_line(timestamp=i, hash_ids=[i, 9]) for i in range(4)])]
    ingest(con, before)
    start = counts(con)
    firsts = [
        write_lines([mooncake_line(timestamp=i, hash_ids=[k, i]) for i in range(5)])
        for k in range(2)
    ]
    con.close()
    settings = ingest_stage.IngestSettings(tuple(str(p) for p in [*firsts, make(tmp_path)]))
    with pytest.raises(error):
        ingest_stage.ingest_logs(path, settings)
    with duckdb.connect(str(path)) as again:
        assert counts(again) == start
        status = again.execute("SELECT status FROM runs ORDER BY started_at DESC LIMIT 1")
        assert status.fetchone() == ("failed",)


def test_a_failure_inside_the_publish_rolls_back_every_file(wh, write_lines, monkeypatch) -> None:
    _, con = wh
    files = [write_lines([mooncake_line(timestamp=i)] * 3) for i in range(2)]
    real = loader_module._insert
    calls = []

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(loader_module, "_insert", failing)
    with pytest.raises(OSError, match="disk full"):
        ingest(con, files)
    assert counts(con) == (0, 0, 0)


def test_the_same_path_twice_is_ingested_once(wh, write_lines, tmp_path) -> None:
    _, con = wh
    path = write_lines([mooncake_line(timestamp=i) for i in range(7)])
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    relative = os.path.relpath(path)
    result = ingest(con, [path, path, link, relative])
    assert len(result.files) == 1 and len(result.skipped) == 3
    assert (result.lines, result.accepted) == (7, 7)
    assert counts(con) == (7, 0, 1)


@pytest.mark.parametrize("gz", [False, True], ids=["plain_copy", "gzip_copy"])
def test_the_same_content_under_two_paths_is_ingested_once(wh, write_lines, gz: bool) -> None:
    _, con = wh
    lines = [mooncake_line(timestamp=i) for i in range(6)] + ["garbage"]
    result = ingest(con, [write_lines(lines), write_lines(lines, gz=gz)])
    assert len(result.files) == 1 and len(result.skipped) == 1
    assert counts(con) == (6, 1, 1)


def test_duplicate_request_ids_across_files_of_one_command(wh, tmp_path) -> None:
    _, con = wh
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(line_of("bailian", str(i), i) for i in range(3)) + "\n")
    b.write_text("\n".join(line_of("bailian", str(i), i) for i in range(2, 5)) + "\n")
    result = ingest(con, [a, b], "bailian")
    assert [(f.accepted, f.rejected) for f in result.files] == [(3, 0), (2, 1)]
    # the same command again replaces both files: the ids of the rows it replaces don't count
    again = ingest(con, [a, b], "bailian")
    assert [(f.accepted, f.rejected) for f in again.files] == [(3, 0), (2, 1)]
    assert counts(con) == (5, 1, 2)


# --- growing files ---------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_file_that_grew_replaces_its_earlier_rows(wh, tmp_path, gz: bool) -> None:
    _, con = wh
    path = tmp_path / ("log.jsonl.gz" if gz else "log.jsonl")
    lines = [mooncake_line(timestamp=i, hash_ids=[i, 1]) for i in range(2000)]

    def write(n: int) -> None:
        raw = ("\n".join(lines[:n]) + "\n").encode()
        path.write_bytes(gzip.compress(raw) if gz else raw)

    write(1000)
    assert ingest(con, [path]).accepted == 1000
    write(2000)
    result = ingest(con, [path])
    assert result.files[0].replaced and result.accepted == 2000
    assert counts(con) == (2000, 0, 1)
    # a copy of the grown file under another path is still the same file
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    assert ingest(con, [copy]).files[0].replaced
    assert counts(con) == (2000, 0, 1)


def test_a_grown_file_given_with_its_old_copy_keeps_both_once(wh, tmp_path) -> None:
    _, con = wh
    path, old = tmp_path / "log.jsonl", tmp_path / "old.jsonl"
    lines = [mooncake_line(timestamp=i, hash_ids=[i, 2]) for i in range(20)]
    path.write_text("\n".join(lines[:10]) + "\n")
    ingest(con, [path])
    old.write_text(path.read_text())
    path.write_text("\n".join(lines) + "\n")
    ingest(con, [path, old])  # the grown file and a copy of what it was: both replace the first
    assert counts(con) == (30, 0, 2)


# --- re-ingests that would reject what was accepted --------------------------------------------


#: Lines of one block at both 512 and 256 tokens a block: a file with them is not all rejected
#: at the other block size (a file of which no line is accepted stops on its own).
SHORT = [mooncake_line(timestamp=100 + i, input_length=200, hash_ids=[50 + i]) for i in range(2)]


def test_a_wrong_block_size_reingest_is_refused_unless_replace(wh, write_lines) -> None:
    _, con = wh
    path = write_lines([*(mooncake_line(timestamp=i) for i in range(8)), *SHORT])
    ingest(con, [path])
    before = con.execute("SELECT * FROM requests ORDER BY request_id").fetchall()
    with pytest.raises(ValueError, match="would reject 8 line.*block_count_mismatch.*--replace"):
        ingest(con, [path], block_size=256)
    assert con.execute("SELECT * FROM requests ORDER BY request_id").fetchall() == before
    assert counts(con) == (10, 0, 1)
    result = ingest(con, [path], block_size=256, replace=True)
    assert (result.accepted, result.rejected) == (2, 8)
    assert counts(con) == (2, 8, 1)


def test_replace_is_also_a_keyword_of_ingest_files(wh, write_lines) -> None:
    _, con = wh
    path = write_lines([*(mooncake_line(timestamp=i) for i in range(4)), *SHORT])
    ingest(con, [path])
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        ingest_files(con, [path], "mooncake", IngestOptions(block_size=256), run_id, replace=True)
    assert counts(con) == (2, 4, 1)


def test_a_reingest_with_only_new_rejects_on_new_lines_is_not_refused(wh, tmp_path) -> None:
    _, con = wh
    path = tmp_path / "log.jsonl"
    good = [mooncake_line(timestamp=i, hash_ids=[i, 3]) for i in range(5)]
    path.write_text("\n".join(good) + "\n")
    ingest(con, [path])
    path.write_text("\n".join([*good, "garbage"]) + "\n")
    assert ingest(con, [path]).rejected == 1
    assert counts(con) == (5, 1, 1)


def _openai_log(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.jsonl"
    path.write_text("".join(line_of("openai", str(i), i) + "\n" for i in range(5)))
    return path


@pytest.mark.parametrize(
    "template",
    ["{% for m in messages %}{{ m.content }", "{% if %}", "{{ messages | nosuchfilter }}"],
    ids=["unclosed", "empty_if", "unknown_filter"],
)
def test_a_chat_template_that_does_not_compile_is_one_error(wh, tmp_path, template: str) -> None:
    _, con = wh
    bad = tmp_path / "broken.jinja"
    bad.write_text(template)
    with pytest.raises(ValueError, match=r"chat template .*broken\.jinja does not compile") as info:
        ingest(con, [_openai_log(tmp_path)], "openai", chat_template=str(bad))
    assert "\n" not in str(info.value)
    assert counts(con) == (0, 0, 0)


def test_a_missing_chat_template_is_one_error(wh, tmp_path) -> None:
    _, con = wh
    with pytest.raises(ValueError, match="cannot read the chat template"):
        ingest(con, [_openai_log(tmp_path)], "openai", chat_template=str(tmp_path / "no.jinja"))
    assert counts(con) == (0, 0, 0)


def test_a_template_failing_per_line_on_reingest_is_refused_unless_replace(wh, tmp_path) -> None:
    _, con = wh
    log = _openai_log(tmp_path)
    ingest(con, [log], "openai")
    failing = tmp_path / "failing.jinja"
    # fails on every request but the first (one that fails on all stops on its own)
    failing.write_text(
        "{% if 'number 0' in messages[0]['content'] %}{{ messages[0]['content'] }}"
        "{% else %}{{ raise_exception('unsupported role') }}{% endif %}"
    )
    with pytest.raises(ValueError, match="would reject 4 line.*template_error"):
        ingest(con, [log], "openai", chat_template=str(failing))
    assert counts(con) == (5, 0, 1)
    result = ingest(con, [log], "openai", chat_template=str(failing), replace=True)
    assert (result.accepted, result.rejected) == (1, 4)
    assert counts(con) == (1, 4, 1)


# --- warehouses of older versions -------------------------------------------------------------


def test_an_older_sources_table_gains_resolved_path_and_matches_by_path(tmp_path) -> None:
    path = tmp_path / "old.duckdb"
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(mooncake_line(timestamp=i, hash_ids=[i, 4]) for i in range(3)) + "\n")
    con = warehouse.connect(path)
    ingest(con, [log])
    con.execute("ALTER TABLE sources DROP COLUMN resolved_path")  # as an older version left it
    con.close()
    con = warehouse.connect(path)
    try:
        columns = [r[0] for r in con.execute("DESCRIBE sources").fetchall()]
        assert "resolved_path" in columns
        log.write_text(
            "\n".join(mooncake_line(timestamp=i, hash_ids=[i, 4]) for i in range(6)) + "\n"
        )
        assert ingest(con, [log]).files[0].replaced
        assert counts(con) == (6, 0, 1)
    finally:
        con.close()


@pytest.mark.parametrize("fresh", [True, False])
def test_an_ingests_run_spans_its_parse_even_where_it_creates_the_warehouse(
    tmp_path, write_lines, monkeypatch, fresh: bool
) -> None:
    """Into a new warehouse the run's row goes in with the first write, after every file is
    parsed; it still starts when the stage did, so ``runs`` times the whole stage."""
    path = tmp_path / "wh.duckdb"
    log = write_lines([mooncake_line(timestamp=i) for i in range(3)])
    settings = ingest_stage.IngestSettings((str(log),), "mooncake", IngestOptions())
    if not fresh:
        ingest_stage.ingest_logs(path, settings)
    real, parsed = ingest_stage.stage_files, []

    @contextmanager
    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        began = time.time()
        with real(*args, **kwargs) as staged:
            time.sleep(0.3)
            parsed.append((began, time.time()))
            yield staged

    monkeypatch.setattr(ingest_stage, "stage_files", slow)
    ingest_stage.ingest_logs(path, settings)
    with duckdb.connect(str(path), read_only=True) as con:
        started, finished = con.execute(
            "SELECT epoch(started_at), epoch(finished_at) FROM runs ORDER BY started_at DESC "
            "LIMIT 1"
        ).fetchone()
    (began, ended), = parsed
    assert started <= began and finished >= ended

"""Staging: what a command holds between parsing and publishing, and how it is parsed.

Rows are held in memory for the last file read and spilled to Arrow files for the others; the
published rows are exactly the staged ones; batches parsed two at a time come back in order."""

from __future__ import annotations

import functools
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from prefixscope import warehouse
from prefixscope.ingest import IngestOptions
from prefixscope.ingest.formats import base
from prefixscope.ingest.lines import read_line_batches
from prefixscope.ingest.loader import FormatMismatch, publish, stage_files
from prefixscope.ingest.parallel import ordered_map
from tests.conftest import mooncake_line


def messy(i: int) -> str:
    """Line ``i`` of a log that takes both parse paths and rejects every few lines."""
    if i % 11 == 0:
        return "not json"
    if i % 7 == 0:
        return mooncake_line(timestamp=i, input_length=600, hash_ids=[1])  # wrong block count
    if i % 5 == 0:
        return '{"tenant": {"a": [1, "x"]}, ' + mooncake_line(timestamp=i)[1:]
    return mooncake_line(timestamp=i, hash_ids=[i, i + 1])


@pytest.fixture
def small_batches(monkeypatch) -> None:
    """Read in chunks of 2 KiB, so each file is many batches (many parses in flight)."""
    monkeypatch.setattr(base, "read_line_batches", functools.partial(read_line_batches,
                                                                     chunk_bytes=2048))  # fmt: skip


def test_only_the_last_file_is_held_and_published_rows_are_the_staged_ones(
    wh, write_lines, small_batches
) -> None:
    _, con = wh
    paths = [write_lines([messy(i + 1000 * k) for i in range(300)]) for k in range(3)]
    with stage_files(paths, "mooncake", IngestOptions()) as staged:
        first, second, last = staged.files
        assert first.held is None and second.held is None and last.held is not None
        assert first.rows_file and first.rows_file.exists() and last.rows_file is None
        expected = []
        for f in staged.files:
            rows = f.rows()
            assert rows.schema == base.STAGE_SCHEMA and rows.num_rows == f.state.lines == 300
            assert rows.select(["line", "reason", "detail"]).equals(
                f.stage.select(["line", "reason", "detail"])
            )
            ok = rows.filter(pc.is_null(rows["reason"]))
            expected += [
                (f.file_id, r["line"], r["arrival_ts"], r["input_tokens"], r["block_hashes"])
                for r in ok.to_pylist()
            ]
        with warehouse.recorded_run(con, "ingest", {}) as run_id:
            result = publish(con, staged, run_id)
    got = con.execute(
        "SELECT file_id, source.line, arrival_ts, input_tokens, block_hashes FROM requests "
        "ORDER BY file_id, source.line"
    ).fetchall()
    assert got == sorted(expected)
    assert result.accepted == len(expected) and result.rejected == 900 - len(expected)
    assert 0 < result.rejected < 300


def test_parsing_in_batches_two_at_a_time_stages_what_one_batch_does(
    wh, write_lines, monkeypatch
) -> None:
    path = write_lines([messy(i) for i in range(500)])
    with stage_files([path], "mooncake", IngestOptions()) as whole:
        one = whole.files[0].rows()
    monkeypatch.setattr(base, "read_line_batches", functools.partial(read_line_batches,
                                                                     chunk_bytes=1024))  # fmt: skip
    with stage_files([path], "mooncake", IngestOptions()) as batched:
        many = batched.files[0].rows()
    assert many.equals(one)


def test_ordered_map_keeps_the_order_and_at_most_one_item_per_cursor() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def slow(cursor: str, i: int) -> tuple[str, int]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.001 * ((i * 7) % 5))
        with lock:
            running -= 1
        return cursor, i

    out = list(ordered_map(slow, iter(range(40)), ["a", "b"]))  # type: ignore[arg-type]
    assert [i for _, i in out] == list(range(40))
    assert {c for c, _ in out} == {"a", "b"} and most <= 2


def test_ordered_map_raises_at_the_failing_item_and_stops_reading() -> None:
    read: list[int] = []

    def items():  # type: ignore[no-untyped-def]
        for i in range(100):
            read.append(i)
            yield i

    def parse(_: object, i: int) -> int:
        if i == 3:
            raise ValueError("bad batch")
        return i

    got: list[int] = []
    with pytest.raises(ValueError, match="bad batch"):
        for x in ordered_map(parse, items(), [object(), object()]):  # type: ignore[list-item]
            got.append(x)
    assert got == [0, 1, 2] and len(read) <= 6


def test_a_staged_file_spills_once_and_reads_back_the_same_rows(write_lines, tmp_path) -> None:
    path = write_lines([messy(i) for i in range(50)])
    with stage_files([path], "mooncake", IngestOptions()) as staged:
        f = staged.files[0]
        held = f.rows()
        f.spill(tmp_path / "rows.arrow")
        f.spill(tmp_path / "again.arrow")  # already spilled: nothing to do
        assert f.held is None and not (tmp_path / "again.arrow").exists()
        assert f.rows().equals(held)
        assert isinstance(f.rows()["block_hashes"], pa.ChunkedArray)


def test_a_file_of_another_format_stops_with_its_later_batches_in_flight(
    write_lines, small_batches, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None  # read TMPDIR again
    try:
        path = write_lines(['{"user": "a", "text": "not a mooncake line"}'] * 2000)
        with pytest.raises(FormatMismatch, match="does not look like mooncake"):
            stage_files([path], "mooncake", IngestOptions())
        assert not list(tmp_path.glob("prefixscope-*"))  # the staging directory is gone
        assert not [t for t in threading.enumerate() if t.name.startswith("prefixscope-")]
    finally:
        tempfile.tempdir = None

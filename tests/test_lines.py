"""The line reader: exact line numbers and bytes, any chunking, gzip cut short."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.ingest.lines import FileReadState, read_line_batches


def read_all(path: Path, chunk_bytes: int) -> tuple[list[tuple[int, bytes]], FileReadState]:
    state = FileReadState()
    rows: list[tuple[int, bytes]] = []
    for batch in read_line_batches(path, state, chunk_bytes=chunk_bytes):
        rows += zip(batch.table["line"].to_pylist(), batch.table["raw"].to_pylist(), strict=True)
    return rows, state


def expected_lines(data: bytes) -> list[bytes]:
    """Lines as a person counts them: a final newline does not start another line."""
    if not data:
        return []
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"{", b"\n", b"\r", b"\xff", b"xyz"]), max_size=60).map(
        b"".join
    ),
    chunk=st.integers(min_value=1, max_value=17),
    gz=st.booleans(),
)
def test_any_chunking_gives_the_same_numbered_lines(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk: int, gz: bool
) -> None:
    path = tmp_path_factory.mktemp("lines") / "f"
    path.write_bytes(gzip.compress(data) if gz else data)
    rows, state = read_all(path, chunk)
    want = expected_lines(data)
    assert [raw for _, raw in rows] == want
    assert [n for n, _ in rows] == list(range(1, len(want) + 1))
    assert state.lines == len(want) and state.truncated is None
    assert state.bytes_read == len(data)


@pytest.mark.parametrize(
    ("cut_at", "kept_lines", "tail_bytes"),
    [
        ("mid_line", 2, b'{"c": '),  # a partial third line is read back as the tail
        ("line_end", 2, None),  # the cut falls on a newline: the lost tail is a phantom line
    ],
)
def test_a_gzip_cut_short_keeps_complete_lines_and_reports_the_tail(
    tmp_path: Path, cut_at: str, kept_lines: int, tail_bytes: bytes | None
) -> None:
    # A stream flushed after `target` and then cut: what a writer killed mid-file leaves.
    target = b'{"a": 1}\n{"b": 2}\n' + (b'{"c": ' if cut_at == "mid_line" else b"")
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    cut_stream = comp.compress(target) + comp.flush(zlib.Z_SYNC_FLUSH)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(cut_stream)
    rows, state = read_all(path, 4)
    assert [raw for _, raw in rows][:kept_lines] == [b'{"a": 1}\n', b'{"b": 2}\n']
    assert state.truncated is not None and state.truncated[0] == kept_lines + 1
    if tail_bytes is None:
        assert len(rows) == kept_lines and state.lines == kept_lines + 1
    else:
        assert rows[-1] == (kept_lines + 1, tail_bytes) and state.lines == kept_lines + 1

"""Mooncake ingest: the bundled trace, every reject reason, idempotence, options."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from prefixscope import warehouse
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.ingest.hashkey import resolve_key
from tests.conftest import Bundled, mooncake_line


def ingest(con, paths, **options):  # type: ignore[no-untyped-def]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        return ingest_files(con, paths, "mooncake", IngestOptions(**options), run_id)


def test_bundled_trace_is_accepted_whole(bundled_warehouse: Bundled) -> None:
    # The session's one ingest of the bundled trace, by the ingest stage.
    result = bundled_warehouse.result
    assert (result.lines, result.accepted, result.rejected) == (12_031, 12_031, 0)
    with warehouse.connect(bundled_warehouse.path, read_only=True) as con:
        requests, blocks, tokens, tenants, span = con.execute(
            "SELECT count(*), sum(len(block_hashes)), sum(input_tokens), "
            "count(DISTINCT tenant), max(arrival_ts) - min(arrival_ts) FROM requests"
        ).fetchone()
        first = con.execute(
            "SELECT block_hashes, input_tokens, output_tokens, source.line FROM requests "
            "ORDER BY source.line LIMIT 1"
        ).fetchone()
        runs = con.execute("SELECT run_id, command, status FROM runs").fetchall()
    assert (requests, blocks, tokens, tenants) == (12_031, 288_500, 144_793_823, 1)
    assert span.total_seconds() == pytest.approx(3_536.999)
    # The file id is the SHA-256 of the decompressed bytes, as published beside the trace.
    assert result.files[0].file_id.startswith("b8cbb061a85206d729d91cdc2981f43c")
    # the line's ids, keyed by the session's key as every stored hash is
    key = resolve_key(None)
    assert key is not None
    assert first == (key.hashes(np.arange(14, dtype=np.uint64)).tolist(), 6758, 500, 1)
    assert runs == [(result.run_id, "ingest", "succeeded")]


# One broken line each, and the reason it must be rejected with.
BROKEN = [
    ("blank_line", b"   "),
    ("invalid_utf8", b'{"timestamp": 0, "note": "\xff\xfe"}'),
    ("invalid_json", b'{"timestamp": 0, "input_length": 600'),
    ("not_an_object", b"[1, 2, 3]"),
    ("missing_field", b'{"timestamp": 0, "input_length": 600, "output_length": 1}'),
    (
        "missing_field",
        b'{"timestamp": null, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    ),
    (
        "wrong_type",
        b'{"timestamp": "soon", "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    ),
    (
        "wrong_type",
        b'{"timestamp": 0, "input_length": 600.5, "output_length": 1, "hash_ids": [1, 2]}',
    ),
    (
        "wrong_type",
        b'{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, "2"]}',
    ),
    (
        "wrong_type",
        b'{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, -2]}',
    ),
    (
        "wrong_type",
        b'{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": {"a": 1}}',
    ),
    (
        "out_of_range",
        b'{"timestamp": -5, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}',
    ),
    ("out_of_range", b'{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}'),
    (
        "out_of_range",
        b'{"timestamp": 0, "input_length": 600, "output_length": -1, "hash_ids": [1, 2]}',
    ),
    (
        "block_count_mismatch",
        b'{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}',
    ),
    (
        "block_count_mismatch",
        b'{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}',
    ),
]


@pytest.mark.parametrize(
    ("reason", "raw"), BROKEN, ids=[f"{r}-{i}" for i, (r, _) in enumerate(BROKEN)]
)
def test_each_broken_line_is_rejected_with_its_reason(
    wh, write_lines, reason: str, raw: bytes
) -> None:
    _, con = wh
    path = write_lines([mooncake_line(), raw, mooncake_line(timestamp=5)])
    result = ingest(con, [path])
    assert (result.lines, result.accepted, result.rejected) == (3, 2, 1)
    got = con.execute("SELECT source.line, reason, detail FROM rejects").fetchall()
    assert [(line, r) for line, r, _ in got] == [(2, reason)]
    assert got[0][2]  # a reason always comes with a message


def test_broken_lines_mixed_into_good_ones_all_add_up(wh, write_lines) -> None:
    _, con = wh
    good = [mooncake_line(timestamp=i * 10, hash_ids=[7, 100 + i]) for i in range(40)]
    lines: list[str | bytes] = []
    for i, g in enumerate(good):
        lines.append(g)
        lines.append(BROKEN[i % len(BROKEN)][1])
    path = write_lines(lines, gz=True)
    result = ingest(con, [path], hash_key=None)  # plain: the ids as the lines give them
    assert result.lines == len(lines) == result.accepted + result.rejected
    assert result.accepted == len(good)
    stored = con.execute("SELECT block_hashes[2] FROM requests ORDER BY source.line").fetchall()
    assert [h for (h,) in stored] == [100 + i for i in range(40)]
    reasons = dict(con.execute("SELECT reason, count(*) FROM rejects GROUP BY 1").fetchall())
    assert sum(reasons.values()) == 40 and set(reasons) == {r for r, _ in BROKEN}
    lines_seen = con.execute(
        "SELECT count(DISTINCT l) FROM (SELECT source.line AS l FROM requests "
        "UNION ALL SELECT source.line FROM rejects)"
    ).fetchone()[0]
    assert lines_seen == len(lines)  # every line is in exactly one table


def test_rejects_never_quote_the_line(wh, write_lines) -> None:
    _, con = wh
    secret = "CONFIDENTIAL-PROMPT-TEXT"
    path = write_lines(
        [
            mooncake_line(),
            f'{{"timestamp": 0, "input_length": 600, "prompt": "{secret}"',
            f'{{"timestamp": "{secret}", "input_length": 600, "output_length": 1, '
            '"hash_ids": [1, 2]}',
            f'["{secret}"]',
        ]
    )
    ingest(con, [path])
    dump = json.dumps(con.execute("SELECT * FROM rejects").fetchall(), default=str)
    dump += json.dumps(con.execute("SELECT * FROM requests").fetchall(), default=str)
    assert con.execute("SELECT count(*) FROM rejects").fetchone()[0] == 3
    assert secret not in dump


def test_reingesting_the_same_content_replaces_rather_than_duplicates(wh, write_lines) -> None:
    _, con = wh
    lines = [mooncake_line(timestamp=i) for i in range(5)] + ["garbage"]
    plain, gz = write_lines(lines), write_lines(lines, gz=True)
    first = ingest(con, [plain])
    second = ingest(con, [gz])  # same content, other path and compression
    assert not first.files[0].replaced and second.files[0].replaced
    counts = con.execute(
        "SELECT (SELECT count(*) FROM requests), (SELECT count(*) FROM rejects), "
        "(SELECT count(*) FROM sources)"
    ).fetchone()
    assert counts == (5, 1, 1)
    other = write_lines(lines[:3])
    ingest(con, [other])
    assert con.execute("SELECT count(*) FROM requests").fetchone()[0] == 8


def test_truncated_gzip_keeps_what_was_read_and_rejects_the_tail(wh, tmp_path: Path) -> None:
    _, con = wh
    body = "\n".join(mooncake_line(timestamp=i) for i in range(3)).encode() + b"\n"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    stream = comp.compress(body + b'{"timestamp": 9, "input_le') + comp.flush(zlib.Z_SYNC_FLUSH)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(stream)
    result = ingest(con, [path])
    assert (result.lines, result.accepted, result.rejected) == (4, 3, 1)
    assert not result.files[0].complete
    assert con.execute("SELECT source.line, reason FROM rejects").fetchall() == [
        (4, "truncated_file")
    ]
    assert con.execute("SELECT complete FROM sources").fetchone() == (False,)


def test_corrupt_gzip_never_crashes(wh, tmp_path: Path) -> None:
    _, con = wh
    rng = random.Random(7)  # random ids: the stream is much longer than one zlib read
    lines = (
        mooncake_line(timestamp=i, hash_ids=[rng.getrandbits(63) for _ in range(2)])
        for i in range(4000)
    )
    data = bytearray(gzip.compress("\n".join(lines).encode()))
    data[len(data) // 2 : len(data) // 2 + 16] = b"\x00" * 16
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(bytes(data))
    result = ingest(con, [path])
    assert result.lines == result.accepted + result.rejected
    assert 0 < result.accepted < 4000
    assert (
        con.execute("SELECT count(*) FROM rejects WHERE reason = 'truncated_file'").fetchone()[0]
        == 1
    )


@pytest.mark.parametrize(
    ("options", "expect"),
    [
        ({}, ("default", datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC), 512)),
        (
            {"tenant": "kimi", "start": datetime(2026, 11, 1, tzinfo=UTC), "block_size": 256},
            ("kimi", datetime(2026, 11, 1, 0, 0, 1, 500_000, tzinfo=UTC), 256),
        ),
    ],
)
def test_options_set_tenant_start_and_block_size(wh, write_lines, options, expect) -> None:
    _, con = wh
    block_size = options.get("block_size", 512)
    path = write_lines([mooncake_line(timestamp=1500, input_length=600, block_size=block_size)])
    ingest(con, [path], **options)
    row = con.execute("SELECT tenant, arrival_ts, block_size FROM requests").fetchone()
    assert row == expect


def test_crlf_and_missing_final_newline_are_fine(wh, write_lines) -> None:
    _, con = wh
    path = write_lines([mooncake_line() + "\r", mooncake_line(timestamp=3)], newline_at_end=False)
    result = ingest(con, [path])
    assert (result.lines, result.accepted) == (2, 2)


def test_an_empty_file_is_zero_lines(wh, write_lines) -> None:
    _, con = wh
    result = ingest(con, [write_lines([])])
    assert (result.lines, result.accepted, result.rejected) == (0, 0, 0)
    assert con.execute("SELECT lines FROM sources").fetchone() == (0,)


def test_a_missing_file_fails_before_writing(wh, tmp_path: Path) -> None:
    _, con = wh
    with pytest.raises(FileNotFoundError):
        ingest(con, [tmp_path / "nope.jsonl"])
    assert con.execute("SELECT status FROM runs").fetchone() == ("failed",)

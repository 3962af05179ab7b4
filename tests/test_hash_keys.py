"""Keyed block hashes (``ingest/hashkey.py``): the keyed function is BLAKE2b as published; a
guessed prompt finds no block of a keyed warehouse, while a plain one confirms it; every figure
is the same under any key; a warehouse holds one key; the key's bytes are written nowhere."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.assign import session_keys
from prefixscope.analysis.fleet.routers import RouterSettings
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.load import load_trace
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions
from prefixscope.ingest.hashkey import PLAIN, HashKey, keyed_lists, read_key, resolve_key
from prefixscope.ingest.kvevents.publish import keyed_events
from prefixscope.stages import ingest
from tests.conftest import SAMPLE
from tests.test_ingest_formats import gateway_row

MEMO = (
    "CONFIDENTIAL merger memo: Acme Corp will acquire Globex Inc for {price} billion dollars, "
    "announced to the board on the first Monday of March; do not share outside the deal team."
)


@settings(max_examples=40, deadline=None)
@given(
    key=st.binary(min_size=16, max_size=64),
    values=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=20),
)
def test_the_keyed_hash_is_blake2b_as_published(key: bytes, values: list[int]) -> None:
    got = HashKey(key).hashes(np.array(values, np.uint64)).tolist()
    want = [
        int.from_bytes(
            hashlib.blake2b(v.to_bytes(8, "little"), key=key, digest_size=8).digest(), "little"
        )
        for v in values
    ]
    assert got == want


def test_lists_keep_their_shape_and_nulls() -> None:
    key = HashKey(b"k" * 32)
    lists = pa.list_(pa.uint64())
    column = pa.chunked_array([pa.array([[1, 2], None], lists), pa.array([[2]], lists)])
    out = keyed_lists(column, key).to_pylist()
    k1, k2 = key.hashes(np.array([1, 2], np.uint64)).tolist()
    assert out == [[k1, k2], None, [k2]]


def _memo_log(path: Path, price: str) -> Path:
    rows = [
        gateway_row(f"2026-11-01T10:0{i}:00Z", "acme", MEMO.format(price=price)) for i in (1, 2, 3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _hashes(wh: Path) -> set[int]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return {
            h
            for (h,) in con.execute("SELECT DISTINCT unnest(block_hashes) FROM requests").fetchall()
        }


def _ingest(log: Path, wh: Path, *flags: str) -> None:
    args = ["ingest", "--format", "openai", "--input", str(log), "--warehouse", str(wh)]
    assert main([*args, "--tenant-field", "user", *flags]) == 0


@pytest.mark.parametrize(
    ("victim", "attacker", "found"),
    [
        (["--hash-key-file", "none"], ["--hash-key-file", "none"], True),  # plain: an oracle
        ([], ["--hash-key-file", "none"], False),  # the default key: a guess finds nothing
        (["--hash-key-file", "KEY"], ["--hash-key-file", "none"], False),
        (["--hash-key-file", "KEY"], ["--hash-key-file", "OTHER"], False),  # a key of one's own
        (["--hash-key-file", "KEY"], ["--hash-key-file", "KEY"], True),  # the key's holder
    ],
)  # fmt: skip
def test_a_guessed_prompt_is_confirmed_only_with_the_key(
    tmp_path: Path, victim: list[str], attacker: list[str], found: bool
) -> None:
    keys = {"KEY": tmp_path / "k", "OTHER": tmp_path / "o"}
    for path in keys.values():
        path.write_bytes(os.urandom(32))

    def flags(given: list[str]) -> list[str]:
        return [str(keys.get(x, x)) for x in given]

    _ingest(_memo_log(tmp_path / "memo.jsonl", "4.2"), tmp_path / "victim.duckdb",
            "--pseudonymize-tenants", "tenant-secret", *flags(victim))  # fmt: skip
    stored = _hashes(tmp_path / "victim.duckdb")
    for price, blocks_before_price in (("4.2", None), ("3.9", 1)):
        guess = _memo_log(tmp_path / f"guess-{price}.jsonl", price)
        wh = tmp_path / f"guess-{price}.duckdb"
        _ingest(guess, wh, *flags(attacker))
        hits = len(_hashes(wh) & stored)
        if not found:
            assert hits == 0
        elif blocks_before_price is None:
            assert hits == len(stored)  # the memo as it was: every block confirmed
        else:
            assert 0 < hits < len(stored)  # the blocks before the price only


def test_every_figure_is_the_same_under_any_key(tmp_path: Path) -> None:
    traces = []
    for key in (None, HashKey(os.urandom(32)), HashKey(os.urandom(16))):
        wh = tmp_path / f"{'plain' if key is None else key.fingerprint}.duckdb"
        ingest.ingest_logs(
            wh, ingest.IngestSettings((str(SAMPLE),), "mooncake", IngestOptions(hash_key=key))
        )
        with duckdb.connect(str(wh), read_only=True) as con:
            traces.append(load_trace(con))
            fingerprints = con.execute("SELECT DISTINCT hash_key FROM sources").fetchall()
        assert fingerprints == [(PLAIN if key is None else key.fingerprint,)]
    plain = traces[0]
    routers = RouterSettings()
    for t in traces[1:]:
        assert not np.array_equal(t.hashes, plain.hashes)
        # the same blocks in the same places: each lookup names the first lookup of its block
        assert np.array_equal(t.offsets, plain.offsets)
        assert np.array_equal(t.first_lookup[t.blocks], plain.first_lookup[plain.blocks])
        for policy, capacity in (("lru", 2_000), ("s3fifo", 2_000), ("belady", 2_000)):
            got = POLICIES[policy].hit_blocks(t, capacity)
            assert np.array_equal(got, POLICIES[policy].hit_blocks(plain, capacity))
        # the one router that hashes a prefix routes it the same under any key
        assert np.array_equal(session_keys(t, None, routers), session_keys(plain, None, routers))


def test_a_warehouse_holds_one_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _memo_log(first, "1")
    _memo_log(second, "2")
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_bytes(os.urandom(32))
    other.write_text(os.urandom(32).hex() + "\n")  # hex, as openssl rand -hex writes
    wh = tmp_path / "wh.duckdb"
    _ingest(first, wh, "--hash-key-file", str(key))
    capsys.readouterr()
    for flag in (str(other), "none"):
        args = ["ingest", "--format", "openai", "--input", str(second), "--warehouse", str(wh)]
        assert main([*args, "--tenant-field", "user", "--hash-key-file", flag]) == 2
        err = capsys.readouterr().err
        assert "would never match" in err and "Nothing was written" in err
        assert len(err.strip().splitlines()) == 1
        with duckdb.connect(str(wh), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM sources").fetchone() == (1,)
    _ingest(second, wh, "--hash-key-file", str(key))  # the warehouse's own key is taken
    # a re-ingest of every file under a new key replaces them all
    _ingest(first, tmp_path / "new.duckdb", "--hash-key-file", "none")


def test_the_default_key_is_made_once_owner_only(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PREFIXSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    first = resolve_key(None)
    made = tmp_path / "config" / "hash.key"
    assert first is not None and made.stat().st_mode & 0o777 == 0o600
    assert str(made) in capsys.readouterr().err
    assert resolve_key(None) == first and capsys.readouterr().err == ""  # printed once
    assert resolve_key("none") is None and resolve_key(str(made)) == first


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"short", "16 to 64 bytes"),
        (b"x" * 65, "16 to 64 bytes"),
        (b"y" * 300, "at most 64"),
    ],
)
def test_a_bad_key_file_is_refused_in_one_line(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "key"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=problem):
        read_key(path)
    with pytest.raises(ValueError, match="not a regular file"):
        read_key(tmp_path)


def test_the_keys_bytes_are_written_nowhere(tmp_path: Path) -> None:
    key_file = tmp_path / "secret.key"
    key = os.urandom(32)
    key_file.write_bytes(key)
    wh, page = tmp_path / "wh.duckdb", tmp_path / "page.html"
    _ingest(_memo_log(tmp_path / "memo.jsonl", "4.2"), wh, "--hash-key-file", str(key_file))
    assert (
        main(["simulate", "--warehouse", str(wh), "--policy", "lru", "--capacity-blocks", "8"]) == 0
    )
    assert main(["report", "--warehouse", str(wh), "--out", str(page)]) == 0
    out = tmp_path / "export.jsonl"
    assert main(["export", "--format", "mooncake", "--warehouse", str(wh), "--out", str(out)]) == 0
    fingerprint = HashKey(key).fingerprint
    with duckdb.connect(str(wh), read_only=True) as con:
        recorded = con.execute("SELECT parameters FROM runs WHERE command = 'ingest'").fetchone()
    assert fingerprint in str(recorded) and key.hex() not in str(recorded)
    assert fingerprint in page.read_text()  # the page says the hashes are keyed, and by which
    for written in (wh, page, out):
        data = written.read_bytes()
        assert key not in data and key.hex().encode() not in data


def test_events_are_keyed_as_requests_are() -> None:
    key = HashKey(b"e" * 32)
    rows = pa.table(
        {
            "engine_block_hash": pa.array([b"\x01" * 32, b"\x02" * 32, None], pa.binary()),
            "engine_parent_hash": pa.array([None, b"\x01" * 32, None], pa.binary()),
            "block_id": pa.array([7, 9, None], pa.uint64()),
        }
    )
    out = keyed_events(rows, key).to_pydict()
    assert out["engine_parent_hash"][1] == out["engine_block_hash"][0]  # chains still link
    assert (
        out["engine_block_hash"][0] == key.blob(b"\x01" * 32)
        and len(out["engine_block_hash"][0]) == 8
    )
    assert out["block_id"][:2] == key.hashes(np.array([7, 9], np.uint64)).tolist()
    assert out["block_id"][2] is None and out["engine_block_hash"][2] is None

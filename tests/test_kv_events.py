"""vLLM KV events: captured from a real ZMQ publisher, ingested into ``kv_events``, bad input
into ``rejects``; both of vLLM's encodings (tagged arrays and tagged maps).

The fixture follows vLLM's engine: a prompt's full blocks are stored as one ``BlockStored``
chain (parent = the block before), an eviction is a ``BlockRemoved``, a reset an
``AllBlocksCleared``; the second data-parallel rank publishes on port + 1 with its own seq.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import msgspec
import numpy as np
import pytest
import zmq

from prefixscope import synthetic_events as se
from prefixscope.analysis.validate.pool import EVICTED, POOL_MODELS, PoolRequests, ServiceModel
from prefixscope.cli import main
from prefixscope.ingest.hashing import hash_token_blocks
from prefixscope.ingest.hashkey import resolve_key
from prefixscope.ingest.kvevents import structs
from prefixscope.ingest.kvevents.capture import capture_events
from prefixscope.ingest.kvevents.framing import MAGIC, encode_frame
from prefixscope.ingest.kvevents.rows import _Builder, chained_ids, parse_capture

BLOCK = 16
T0 = 1_780_000_000.0  # the batches' engine time (2026)
# Two prompts sharing their first block; prompt B's tail block is partial (never stored).
PROMPT_A = [int(t) for t in np.random.default_rng(1).integers(0, 150_000, 3 * BLOCK)]
PROMPT_B = PROMPT_A[:BLOCK] + [int(t) for t in np.random.default_rng(2).integers(0, 9, 20)]


def engine_hash(encoding: str, prompt: list[int], blocks: int) -> bytes | int:
    """An engine's chained hash of the first ``blocks`` blocks of ``prompt``: bytes (sha256,
    the newer default) in the map encoding, a 64-bit int in the array encoding."""
    digest = hashlib.sha256(json.dumps(prompt[: blocks * BLOCK]).encode()).digest()
    return digest if encoding == "map" else int.from_bytes(digest[:8], "big")


def fixture_batches(encoding: str) -> list[tuple[int, bytes]]:
    """(rank, payload) in publishing order: what the engine's pools emit for A, B, evictions
    and a reset."""
    h = {}
    for name, prompt in (("A", PROMPT_A), ("B", PROMPT_B)):
        for n in (1, 2, 3):
            h[name, n] = engine_hash(encoding, prompt, n)
    s, r, c = structs.stored, structs.removed, structs.cleared
    e = encoding
    return [
        # rank 0: A's three blocks in one event
        (0, structs.encode_batch(e, T0, [s(e, [h["A", 1], h["A", 2], h["A", 3]], None,
                                           PROMPT_A, BLOCK)], 0)),
        # rank 0: B reuses A's first block, stores its second; the pool evicts A's tail first
        (0, structs.encode_batch(e, T0 + 1, [r(e, [h["A", 3]]),
                                             s(e, [h["B", 2]], h["A", 1],
                                               PROMPT_B[BLOCK : 2 * BLOCK], BLOCK)], 0)),
        # rank 1 (its own publisher): B from scratch, on the CPU tier too
        (1, structs.encode_batch(e, T0 + 2, [s(e, [h["B", 1], h["B", 2]], None,
                                               PROMPT_B[: 2 * BLOCK], BLOCK),
                                             s(e, [h["B", 1]], None, PROMPT_B[:BLOCK], BLOCK,
                                               "CPU")], 1)),
        # rank 0: a cache reset
        (0, structs.encode_batch(e, T0 + 3, [c(e)], 0)),
    ]  # fmt: skip


def expected_ids(keyed: bool = True) -> dict[str, list[int]]:
    """prefixscope's ids of the prompts' full blocks, as ingest of their tokens gives them:
    keyed by the user's key, as every stored hash is (``keyed``), else as parsed."""
    offsets = np.array([0, len(PROMPT_A), len(PROMPT_A) + len(PROMPT_B)])
    hash_offsets, hashes = hash_token_blocks(offsets, np.array(PROMPT_A + PROMPT_B), BLOCK)
    key = resolve_key(None) if keyed else None
    hashes = hashes if key is None else key.hashes(hashes)
    a = hashes[hash_offsets[0] : hash_offsets[1]].tolist()
    b = hashes[hash_offsets[1] : hash_offsets[2]].tolist()
    return {"A": a, "B": b}


@dataclass
class Publisher:
    """vLLM's wire format from real PUB-side sockets, one per rank (port, port + 1). XPUB
    hears each subscription, so nothing is sent before the subscriber has joined (ZMQ's slow
    joiner would drop it)."""

    ports: list[int]
    thread: threading.Thread


def start_publisher(
    batches: list[tuple[int, bytes]], ranks: int = 2, identity: bytes = b""
) -> Publisher:
    """``identity``: 16 bytes after each sequence, as a publisher with a snapshot endpoint
    sends them (vLLM at 0aa3ce8, docs/features/kv_events.md); empty: the plain 8."""
    ctx = zmq.Context.instance()
    socks = [ctx.socket(zmq.XPUB) for _ in range(ranks)]
    base = socks[0].bind_to_random_port("tcp://127.0.0.1", min_port=20_000, max_port=60_000)
    ports = [base]
    for sock in socks[1:]:
        sock.bind(f"tcp://127.0.0.1:{base + len(ports)}")
        ports.append(base + len(ports))

    def serve() -> None:
        for sock in socks:  # wait until the subscriber has subscribed on every rank
            assert sock.poll(5_000), "no subscriber joined"
            sock.recv()
        seqs = [0] * ranks
        for rank, payload in batches:
            socks[rank].send_multipart([b"", seqs[rank].to_bytes(8, "big") + identity, payload])
            seqs[rank] += 1
        time.sleep(0.05)
        for sock in socks:  # the publisher goes away: the capture hears it leave
            sock.close(linger=1_000)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return Publisher(ports, thread)


def capture_live(
    batches: list[tuple[int, bytes]], out: Path, identity: bytes = b""
) -> tuple[object, list[str]]:
    pub = start_publisher(batches, identity=identity)
    stop = threading.Event()
    notices: list[str] = []

    def on_notice(line: str) -> None:
        notices.append(line)
        if len(notices) == len(pub.ports):
            stop.set()

    summary = capture_events(
        [f"tcp://127.0.0.1:{p}" for p in pub.ports],
        out,
        duration=4.0,
        stop=stop,
        notice=on_notice,
    )
    pub.thread.join(2)
    return summary, notices


def run_cli(*argv: str) -> int:
    return main([str(a) for a in argv])


def events_of(wh: Path) -> list[tuple]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(
            """SELECT rank, kind, block_id, medium, block_size, engine_parent_hash IS NULL
               FROM kv_events ORDER BY frame, event_index, block_index"""
        ).fetchall()


@pytest.mark.parametrize(
    ("encoding", "identity"),
    [("array", b""), ("map", b""), ("map", bytes(range(16)))],
    ids=["array", "map", "map-snapshot-framing"],
)
def test_live_capture_then_ingest(tmp_path: Path, encoding: str, identity: bytes, capsys) -> None:
    """Captured from a live publisher of two ranks, every block lands with vLLM's order, rank
    and medium, and with the id that prefixscope's own hashing gives the prompt's block; the
    same from a publisher whose sequence frames carry its 16-byte identity (snapshots on)."""
    out = tmp_path / "events.bin"
    batches = fixture_batches(encoding)
    if identity:  # a publisher with snapshots on also sends an empty batch each idle second
        batches.insert(1, (0, structs.encode_batch(encoding, T0 + 0.5, [], 0)))
    summary, notices = capture_live(batches, out, identity)
    assert summary.batches == len(batches) and summary.missing == 0
    assert summary.stopped_by == "stop" and summary.malformed == 0
    assert len(notices) == 2 and "valid up to its last whole frame" in notices[0]
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "vllm-events", "--input", out, "--warehouse", wh) == 0
    printed = capsys.readouterr().out
    assert f"{len(batches)} batches, 9 events, 9 accepted, 0 rejected" in printed
    ids = expected_ids()
    rows = events_of(wh)
    # Within a rank, the order is the publisher's; across ranks, the order of arrival.
    by_rank = {r: [row[1:] for row in rows if row[0] == r] for r in (0, 1)}
    a, b = ids["A"], ids["B"]
    assert by_rank[0] == [
        ("stored", a[0], "GPU", BLOCK, True),
        ("stored", a[1], "GPU", BLOCK, False),
        ("stored", a[2], "GPU", BLOCK, False),
        ("removed", a[2], "GPU", None, True),
        ("stored", b[1], "GPU", BLOCK, False),
        ("cleared", None, None, None, True),
    ]
    assert by_rank[1] == [
        ("stored", b[0], "GPU", BLOCK, True),
        ("stored", b[1], "GPU", BLOCK, False),
        ("stored", b[0], "CPU", BLOCK, True),
    ]
    assert a[0] == b[0]  # the shared first block is one block, on both ranks


def test_events_link_to_requests(tmp_path: Path) -> None:
    """Ingested beside the prompts' requests (--format tokens), every stored block is one of
    the requests' blocks; a warehouse of another block size rejects the events."""
    lines = [{"timestamp": T0 + i, "token_ids": p} for i, p in enumerate((PROMPT_A, PROMPT_B))]
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "events.bin"
    write_capture(out, [(0, p) for _, p in fixture_batches("map")])
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "tokens", "--input", log, "--warehouse", wh) == 0
    assert run_cli("ingest", "--format", "vllm-events", "--input", out, "--warehouse", wh) == 0
    with duckdb.connect(str(wh), read_only=True) as con:
        unlinked = con.execute(
            """SELECT count(*) FROM kv_events
               WHERE kind = 'stored' AND block_id NOT IN
                     (SELECT unnest(block_hashes) FROM requests)"""
        ).fetchone()
        assert unlinked == (0,)
    wh32 = tmp_path / "wh32.duckdb"
    assert run_cli("ingest", "--format", "tokens", "--input", log, "--block-size", 32,
                   "--warehouse", wh32) == 0  # fmt: skip
    # Every event is of 16-token blocks: the whole file is unusable for this warehouse.
    assert run_cli("ingest", "--format", "vllm-events", "--input", out, "--warehouse", wh32) == 2
    with duckdb.connect(str(wh32), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kv_events").fetchone() == (0,)


#: LMCache's default chunk (``chunk_size``), and a prompt of two whole chunks and a short one.
CHUNK = 256
PROMPT_C = [int(t) for t in np.random.default_rng(3).integers(0, 150_000, 2 * CHUNK + 88)]


def lmcache_batches(encoding: str) -> list[tuple[int, bytes]]:
    """What vLLM's publisher sends for LMCache's store of PROMPT_C (``LMCacheEngine.store``,
    ``lmcache/v1/cache_engine.py`` at LMCache/LMCache 000620e37eb7e8e54bd6f0aa0809b7dbef8a11e8):
    a ``BlockStored`` per chunk, of one hash, medium ``cpu``, the chunk's tokens and their count
    as its block size, its parent the chunk before; then a store that skipped the chunks LMCache
    held already, whose first chunk names parent 0 (``prev_key`` starts at 0 there), and the
    eviction of the first chunk."""
    e = encoding
    bounds = [(0, CHUNK), (CHUNK, 2 * CHUNK), (2 * CHUNK, len(PROMPT_C))]
    h = [engine_hash(e, PROMPT_C, -(-end // BLOCK)) for _, end in bounds]  # the prefix to end
    chunks = [
        structs.stored(e, [h[i]], None if i == 0 else h[i - 1], PROMPT_C[start:end],
                       end - start, "cpu")
        for i, (start, end) in enumerate(bounds)
    ]  # fmt: skip
    again = structs.stored(e, [h[1]], 0, PROMPT_C[CHUNK : 2 * CHUNK], CHUNK, "cpu")
    return [
        (0, structs.encode_batch(e, T0, chunks, 0)),
        (0, structs.encode_batch(e, T0 + 1, [again, structs.removed(e, [h[0]], "cpu")], 0)),
    ]


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_lmcache_chunks_land_as_the_warehouse_blocks(tmp_path: Path, encoding: str) -> None:
    """LMCache's chunk events, captured from a live publisher and ingested beside the prompt's
    requests (blocks of 16): each chunk is its 16 blocks, with the prompt's own ids; the short
    last chunk's whole blocks land and its last 8 tokens are no block; a chunk whose parent
    LMCache did not name lands without ids; a chunk's removal removes each of its blocks."""
    log = tmp_path / "requests.jsonl"
    log.write_text(json.dumps({"timestamp": T0, "token_ids": PROMPT_C}) + "\n")
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "tokens", "--input", log, "--warehouse", wh) == 0
    out = tmp_path / "events.bin"
    pub = start_publisher(lmcache_batches(encoding), ranks=1)
    summary = capture_events([f"tcp://127.0.0.1:{pub.ports[0]}"], out, duration=3.0)
    pub.thread.join(2)
    assert summary.batches == 2
    assert run_cli("ingest", "--format", "vllm-events", "--input", out, "--warehouse", wh) == 0
    offsets = np.array([0, len(PROMPT_C)])
    _, ids = hash_token_blocks(offsets, np.array(PROMPT_C), BLOCK)
    ids = resolve_key(None).hashes(ids).tolist()
    assert len(ids) == 37  # 600 tokens: 37 whole blocks of 16
    per_chunk = CHUNK // BLOCK
    rows = events_of(wh)
    stored = [r for r in rows if r[1] == "stored"]
    assert [r[2] for r in stored[:37]] == ids
    assert {(r[3], r[4]) for r in stored} == {("CPU", BLOCK)}  # media read in capitals
    assert [r[2] for r in stored[37:]] == [None] * per_chunk  # parent 0: no chain
    removed = [r for r in rows if r[1] == "removed"]
    assert [r[2] for r in removed] == ids[:per_chunk]
    with duckdb.connect(str(wh), read_only=True) as con:
        src = con.execute(
            "SELECT lines, accepted, rejected FROM sources WHERE format = 'vllm-events'"
        ).fetchone()
        # the second store named the first chunk's hash again: same hash, one engine chunk
        hashes = con.execute(
            "SELECT count(DISTINCT engine_block_hash) FROM kv_events WHERE kind = 'stored'"
        ).fetchone()
    assert src == (37 + per_chunk + per_chunk, 37 + 2 * per_chunk, 0)
    assert hashes == (3,)


def test_a_gpu_event_of_another_block_size_is_still_refused() -> None:
    """Only an offload tier's events are read as chunks: the GPU pool's must have the
    warehouse's block size (validate compares that pool block by block), and a tier's chunk
    smaller than a block is no block."""
    e = "map"
    gpu = structs.stored(e, [1], None, PROMPT_C[:CHUNK], CHUNK, "GPU")
    small = structs.stored(e, [2], None, PROMPT_C[:8], 8, "cpu")
    builder = _Builder(frozenset({BLOCK}))
    builder.batch(0, 0, T0, structs.encode_batch(e, T0, [gpu, small], 0))
    rows, rejects = builder.tables()
    assert rows.num_rows == 0
    assert rejects["reason"].to_pylist() == ["block_size_mismatch"] * 2


def write_capture(path: Path, messages: list[tuple[int, bytes]], tail: bytes = b"") -> None:
    """A capture file as capture-events writes it: (endpoint, payload) frames, seq per
    endpoint from 0."""
    seqs: dict[int, int] = {}
    with path.open("wb") as f:
        f.write(MAGIC)
        for endpoint, payload in messages:
            seq = seqs.get(endpoint, 0)
            seqs[endpoint] = seq + 1
            f.write(encode_frame(time.time(), seq, endpoint, b"", payload))
        f.write(tail)


def good(encoding: str = "array") -> bytes:
    return fixture_batches(encoding)[0][1]


def _unknown_tag() -> bytes:
    return msgspec.msgpack.encode([T0, [["BlockMoved", [1], "GPU"]], 0])


def _bad_size() -> bytes:
    e = "array"
    return structs.encode_batch(e, T0, [structs.stored(e, [9], None, list(range(32)), 32)], 0)


def _few_tokens() -> bytes:
    e = "map"
    return structs.encode_batch(e, T0, [structs.stored(e, [9, 10], None, list(range(16)), 16)])


BAD_CASES = [
    # (name, extra frame payload, a cut tail, reason, rejected events)
    ("unknown event tag", _unknown_tag(), b"", "unknown_event_tag", 1),
    ("not msgpack", b"\xc1\xc1\xc1", b"", "undecodable_batch", 1),
    ("batch not an array or map", b"\x2a", b"", "malformed_batch", 1),
    ("ts not a number", msgspec.msgpack.encode(["x", []]), b"", "malformed_batch", 1),
    # a ts that is no time, or one that overflows once in microseconds: that batch alone
    ("ts infinite", msgspec.msgpack.encode([math.inf, []]), b"", "malformed_batch", 1),
    ("ts minus infinite", msgspec.msgpack.encode([-math.inf, []]), b"", "malformed_batch", 1),
    ("ts 1e308", msgspec.msgpack.encode([1e308, []]), b"", "malformed_batch", 1),
    # arrays nested 200,000 deep: the decoder's recursion limit, not the file's end
    ("nested 200,000 deep", b"\x91" * 200_000 + b"\x00", b"", "undecodable_batch", 1),
    ("event of the wrong block size", _bad_size(), b"", "block_size_mismatch", 1),
    ("tokens short of the blocks", _few_tokens(), b"", "token_count_mismatch", 1),
    ("a truncated file", None, encode_frame(T0, 9, 0, b"", good())[:-5], "truncated_file", 1),
    ("a corrupt frame", None, b"\xff\xff\xff\xff" + b"\x00" * 30, "corrupt_frame", 1),
]


@pytest.mark.parametrize(
    ("payload", "tail", "reason", "count"),
    [c[1:] for c in BAD_CASES],
    ids=[c[0] for c in BAD_CASES],
)
def test_bad_input_lands_in_rejects(tmp_path, payload, tail, reason, count) -> None:
    """Each bad batch, event or tail is one reject with its reason; the good batch beside it
    lands whole; lines = accepted + rejected."""
    out = tmp_path / "events.bin"
    messages = [(0, good())] + ([(0, payload)] if payload is not None else [])
    write_capture(out, messages, tail)
    parsed = parse_capture(out, {BLOCK})
    assert parsed.accepted == 3  # the good batch's three blocks
    assert parsed.reasons == {reason: count}
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "vllm-events", "--input", out, "--block-size", BLOCK,
                   "--warehouse", wh) == 0  # fmt: skip
    with duckdb.connect(str(wh), read_only=True) as con:
        got = con.execute("SELECT reason, format, source.line FROM rejects").fetchall()
        assert got == [(reason, "vllm-events", 2)]
        src = con.execute("SELECT lines, accepted, rejected, complete FROM sources").fetchone()
        assert src == (3 + count, 3, count, tail == b"")


def test_a_batch_captured_twice_counts_once(tmp_path) -> None:
    """The same batch (seq and bytes) twice in a capture, as one publisher captured through
    two endpoints would give it: its events count once, the copy is one reject; a restarted
    publisher's seq 0 with another batch is kept."""
    out = tmp_path / "events.bin"
    other = structs.encode_batch("map", T0 + 9, [structs.cleared("map")], 0)
    with out.open("wb") as f:
        f.write(MAGIC)
        f.write(encode_frame(T0, 0, 0, b"", good()))
        f.write(encode_frame(T0 + 1, 0, 1, b"", good()))  # the copy, through endpoint 1
        f.write(encode_frame(T0 + 2, 0, 0, b"", other))  # seq 0 again: a restart
    parsed = parse_capture(out, {BLOCK})
    assert parsed.accepted == 4 and parsed.reasons == {"duplicate_batch": 1}


def test_one_publisher_captured_into_two_files_counts_once(tmp_path) -> None:
    """Two captures of one publisher, ingested together: the second file's copies of the
    first's batches are rejects (duplicate_batch), so every event lands once; a file of
    nothing but such copies is ingested, not refused."""
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    write_capture(first, [(0, p) for _, p in fixture_batches("map")])
    write_capture(second, [(0, p) for _, p in fixture_batches("map")[:2]])
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "vllm-events", "--input", first, "--input", second,
                   "--block-size", BLOCK, "--warehouse", wh) == 0  # fmt: skip
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kv_events").fetchone() == (9,)
        got = con.execute("SELECT reason, count(*) FROM rejects GROUP BY ALL").fetchall()
        assert got == [("duplicate_batch", 2)]


@pytest.mark.parametrize("received", [math.inf, -math.inf, math.nan, 1e308])
def test_a_frame_whose_receive_time_is_no_time_is_one_reject(tmp_path, received) -> None:
    """The receive time is the capture's own; a frame whose time is not one (a damaged file)
    is rejected alone, and the batches around it land."""
    out = tmp_path / "events.bin"
    with out.open("wb") as f:
        f.write(MAGIC)
        f.write(encode_frame(T0, 0, 0, b"", good()))
        f.write(encode_frame(received, 1, 0, b"", good()))
    parsed = parse_capture(out, {BLOCK})
    assert parsed.accepted == 3 and parsed.reasons == {"corrupt_frame": 1}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a KV events capture"),
        (b'{"ts": 1}\n', "not a KV events capture"),
        (MAGIC, "holds no batch"),
        (MAGIC + encode_frame(T0, 0, 0, b"", b"\xc1"), "most often: undecodable_batch"),
    ],
    ids=["empty", "json lines", "header only", "nothing decodes"],
)
def test_unusable_file_is_one_line_and_nothing_written(tmp_path, capsys, content, message):
    path = tmp_path / "events.bin"
    path.write_bytes(content)
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "vllm-events", "--input", path, "--warehouse", wh) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not wh.exists()


def test_reingest_replaces(tmp_path: Path) -> None:
    out = tmp_path / "events.bin"
    write_capture(out, [(0, good("map"))])
    wh = tmp_path / "wh.duckdb"
    for _ in range(2):
        assert run_cli("ingest", "--format", "vllm-events", "--input", out, "--warehouse",
                       wh) == 0  # fmt: skip
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kv_events").fetchone() == (3,)
        assert con.execute("SELECT count(*) FROM sources").fetchone() == (1,)


def test_array_batch_of_map_events(tmp_path: Path) -> None:
    """Versions between the two encodings sent an array batch of map events: read as well."""
    events = [structs.stored("map", [1, 2], None, PROMPT_A[: 2 * BLOCK], BLOCK)]
    payload = msgspec.msgpack.encode(structs.ArrayBatch(T0, events, 3))
    assert msgspec.msgpack.decode(payload)[1][0]["type"] == "BlockStored"  # really mixed
    out = tmp_path / "events.bin"
    write_capture(out, [(0, payload)])
    parsed = parse_capture(out, {BLOCK})
    assert parsed.rows["block_id"].to_pylist() == expected_ids(keyed=False)["A"][:2]
    assert parsed.rows["rank"].to_pylist() == [3, 3]


def test_chained_ids_match_hashing_from_any_parent() -> None:
    """Chaining from a parent id continues the same chain hash_token_blocks computes."""
    whole = chained_ids(0, tuple(PROMPT_A), BLOCK)
    assert whole == expected_ids(keyed=False)["A"]
    assert chained_ids(whole[0], tuple(PROMPT_A[BLOCK:]), BLOCK) == whole[1:]


def test_capture_stops_on_interrupt_and_appends(tmp_path: Path) -> None:
    """Ctrl-C ends the capture cleanly with its summary; a second capture appends to the file,
    which stays one valid capture."""
    out = tmp_path / "events.bin"
    batches = fixture_batches("array")
    summary, _ = capture_live(batches, out)
    assert summary.batches == 4
    later = structs.encode_batch("array", T0 + 60, [structs.cleared("array")], 0)
    pub = start_publisher([(0, later)], ranks=1)
    # Ctrl-C as a terminal delivers it to the command, whose handler is Python's own (a test
    # run earlier in this worker may have left another in place)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        second = capture_events([f"tcp://127.0.0.1:{pub.ports[0]}"], out, duration=4.0)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
    assert second.stopped_by == "interrupt" and second.batches == 1
    parsed = parse_capture(out)
    assert parsed.frames == 5 and parsed.tail is None and parsed.rejected == 0


def snapshot_server(reply: list[bytes] | None) -> int:
    """vLLM's snapshot socket (a ROUTER): answers one ``snapshot`` request with ``reply``
    (None: never answers). Returns its port."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1", min_port=20_000, max_port=60_000)

    def serve() -> None:
        if sock.poll(8_000):
            identity, *request = sock.recv_multipart()
            if reply is not None and request == [b"snapshot"]:
                sock.send_multipart([identity, *reply])
        time.sleep(0.5)
        sock.close(linger=1_000)

    threading.Thread(target=serve, daemon=True).start()
    return port


PROMPT_D = [int(t) for t in np.random.default_rng(3).integers(0, 150_000, 2 * BLOCK)]


@pytest.mark.parametrize(
    ("sequence", "answers", "written", "notice"),
    [(7, True, 1, None), (-2, True, 0, "no snapshot to give"), (0, False, 0, "did not answer")],
)
def test_a_snapshot_is_captured_first_and_warms_the_cache(
    tmp_path: Path, sequence: int, answers: bool, written: int, notice: str | None
) -> None:
    """The engine's cache before the capture (prompt D, stored ten minutes before) arrives as
    the snapshot's chunk after the first live batch, its events at their own time: what the
    engine held when the live batches begin (``validate/events.engine_cache``). A publisher
    without a snapshot, or one that never answers, is one notice; the live capture goes on."""
    e = "map"
    hd = [engine_hash(e, PROMPT_D, n) for n in (1, 2)]
    chunk = structs.encode_batch(e, T0 - 600, [structs.stored(e, hd, None, PROMPT_D, BLOCK)], 0)
    reply = [sequence.to_bytes(8, "big", signed=True), b"p" * 16]
    port = snapshot_server((reply + [chunk] if sequence >= 0 else reply) if answers else None)
    pub = start_publisher(fixture_batches(e)[:2], ranks=1)
    out, notices = tmp_path / "events.bin", []
    summary = capture_events(
        [f"tcp://127.0.0.1:{pub.ports[0]}"], out, duration=1.5, notice=notices.append,
        snapshot_endpoints=[f"tcp://127.0.0.1:{port}"], snapshot_timeout_s=0.5,
    )  # fmt: skip
    assert (summary.snapshots, summary.snapshot_batches, summary.batches) == (written, written, 2)
    assert notice is None or any(notice in line for line in notices)
    parsed = parse_capture(out)
    assert parsed.rejected == 0
    stored = [r for r in parsed.rows.to_pylist() if r["kind"] == "stored"]
    assert sum(r["ts"].timestamp() == T0 - 600 for r in stored) == 2 * written


def test_capture_refuses_bad_flags(tmp_path: Path, capsys) -> None:
    """Each is one line, exit 2, and no capture file: full-width digits and a space pass no
    check of ours; ``tcp://...:5557`` passes them and ZMQ refuses it (its socket was once left
    open, and the capture never exited)."""
    bad = ("tcp://*:5557", "localhost:5557", "tcp://host:port", "tcp://127.0.0.1:５５５７",
           "tcp://bad host:5557", "tcp://...:5557")  # fmt: skip
    for endpoint in bad:
        code = run_cli("capture-events", "--endpoint", endpoint, "--out", tmp_path / "x.bin",
                       "--duration", "0.1")  # fmt: skip
        assert code == 2
        err = capsys.readouterr().err
        assert "--endpoint" in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "x.bin").exists()
    not_ours = tmp_path / "notes.txt"
    not_ours.write_text("hello")
    code = run_cli("capture-events", "--endpoint", "tcp://127.0.0.1:1", "--out", not_ours,
                   "--duration", "0.1")  # fmt: skip
    assert code == 2 and not_ours.read_text() == "hello"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--endpoint", "tcp://127.0.0.1:70000"], "port 70000 is not a TCP port"),
        (
            ["--endpoint", "tcp://127.0.0.1:5557", "--endpoint", "tcp://localhost:5557"],
            "reach one publisher",
        ),
        (
            ["--endpoint", "tcp://10.0.0.1:5557", "--endpoint", "tcp://10.0.0.1:05557"],
            "reach one publisher",
        ),
        (
            ["--endpoint", "tcp://127.0.0.1:5557", "--topic", "t\udcff"],
            "--topic: t\\xff is not UTF-8",
        ),
        (["--endpoint", "tcp://127.0.0.1:5557", "--topic", "x" * 70_000], "at most 65,535 bytes"),
    ],
)
def test_capture_refuses_what_would_fail_or_double_later(
    tmp_path: Path, capsys, flags: list[str], says: str
) -> None:
    """Each is one line, exit 2, before anything is captured: a port past 65,535 (not a "bind
    address"), one publisher named twice (every batch would be written twice), a topic that is
    not UTF-8 or longer than a frame holds."""
    out = tmp_path / "x.bin"
    assert run_cli("capture-events", *flags, "--out", out, "--duration", "0.1") == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_a_message_with_a_topic_longer_than_a_frame_holds_is_malformed() -> None:
    from io import BytesIO

    from prefixscope.ingest.kvevents.capture import MAX_TOPIC_BYTES, CaptureSummary, _write

    summary, f, last = CaptureSummary(), BytesIO(), {}
    for n, topic in ((7, MAX_TOPIC_BYTES + 1), (8, MAX_TOPIC_BYTES)):
        _write(f, 0, [b"t" * topic, n.to_bytes(8, "big"), b"payload"], summary, last)
    assert (summary.malformed, summary.batches) == (1, 1) and len(f.getvalue()) > MAX_TOPIC_BYTES
    assert summary.missing == 0  # the skipped message's seq was heard: none is missing


# ---- validate --events: the simulated pool beside an engine pool of known size -------------

SMALL = se.Workload(requests=160, rate_per_s=3.0, system_blocks=(3, 8), message_tokens=(20, 120))


def known_pool_warehouse(tmp: Path, capacities: list[int], encoding: str = "map") -> Path:
    """A log and the events of engines with pools of ``capacities`` (one rank each, the log
    routed by session), both ingested."""
    log = se.make_log(SMALL)
    parts = se.split_by_session(log, len(capacities), SMALL.block_size)
    runs = [
        se.run_engine(part, se.Engine(capacity_blocks=c, jitter_sigma=0.0, encoding=encoding),
                      SMALL.block_size)
        for part, c in zip(parts, capacities, strict=True)
    ]  # fmt: skip
    assert all(r.evictions > 100 for r in runs)  # the pools are full: eviction order matters
    se.write_log(log, tmp / "log.jsonl")
    se.write_capture(runs, tmp / "events.bin", encoding)
    wh = tmp / "wh.duckdb"
    assert run_cli("ingest", "--format", "tokens", "--input", tmp / "log.jsonl",
                   "--output-tokens-field", "output_tokens", "--warehouse", wh) == 0  # fmt: skip
    assert run_cli("ingest", "--format", "vllm-events", "--input", tmp / "events.bin",
                   "--warehouse", wh) == 0  # fmt: skip
    return wh


def test_validate_events_recovers_each_ranks_pool(tmp_path: Path, capsys) -> None:
    """Two ranks with pools of 150 and 260 blocks: the scan picks each rank's own size, where
    the held blocks and the eviction order agree exactly; LRU (no pinning, no tail-first)
    agrees less at its best."""
    wh = known_pool_warehouse(tmp_path, [150, 260])
    grid = "120,150,180,220,260,300"
    assert run_cli("validate", "--events", "--warehouse", wh, "--capacity-blocks", grid) == 0
    assert "rank 1: effective capacity 260 blocks" in capsys.readouterr().out
    with duckdb.connect(str(wh), read_only=True) as con:
        best = con.execute(
            """SELECT rank, capacity_blocks, jaccard, removal_match_share, kendall_tau
               FROM latest_validation_events WHERE best ORDER BY rank"""
        ).fetchall()
        assert best == [(0, 150, 1.0, 1.0, 1.0), (1, 260, 1.0, 1.0, 1.0)]
        windows = con.execute(
            "SELECT count(*), sum(engine_blocks - both_blocks) FROM validation_event_windows"
        ).fetchone()
        assert windows == (40, 0)
    assert run_cli("validate", "--events", "--pool-model", "lru", "--warehouse", wh,
                   "--capacity-blocks", grid) == 0  # fmt: skip
    with duckdb.connect(str(wh), read_only=True) as con:
        lru = con.execute(
            "SELECT max(jaccard) FROM latest_validation_events WHERE model = 'lru' AND best"
        ).fetchone()[0]
    assert lru < 0.99


@pytest.mark.parametrize("model", sorted(POOL_MODELS))
def test_pool_models_never_hold_more_than_capacity(model: str) -> None:
    """Every pool model: at most ``capacity`` blocks held, an evicted block was held, a stored
    one was not."""
    log = se.make_log(SMALL)
    ids = [chained_ids(0, r.tokens[: len(r.tokens) // BLOCK * BLOCK], BLOCK) for r in log]
    offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])])
    requests = PoolRequests(
        np.array([r.arrival_s for r in log]),
        np.array([len(r.tokens) for r in log]),
        np.array([r.output_tokens for r in log]),
        offsets.astype(np.int64),
        np.array([b for i in ids for b in i], np.uint64),
        BLOCK,
    )
    run = POOL_MODELS[model](requests, 120, ServiceModel())
    held: set[int] = set()
    for _, kind, block, _, _ in run.ops:
        if kind == EVICTED:
            assert block in held
            held.remove(block)
        else:
            assert block not in held
            held.add(block)
        assert len(held) <= 120
    assert any(kind == EVICTED for _, kind, *_ in run.ops)


def test_validate_events_without_events_is_one_line(tmp_path: Path, capsys) -> None:
    log = tmp_path / "log.jsonl"
    se.write_log(se.make_log(se.Workload(requests=5)), log)
    wh = tmp_path / "wh.duckdb"
    assert run_cli("ingest", "--format", "tokens", "--input", log, "--warehouse", wh) == 0
    capsys.readouterr()
    assert run_cli("validate", "--events", "--warehouse", wh) == 2
    err = capsys.readouterr().err
    assert "no KV events" in err and len(err.strip().splitlines()) == 1

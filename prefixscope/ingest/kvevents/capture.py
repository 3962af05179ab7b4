"""Subscribe to vLLM KV events publishers and append their raw batches to a capture file.

vLLM's publisher (``ZmqEventPublisher`` in ``vllm/distributed/kv_events.py``, set up by
``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
"tcp://*:5557", "topic": ""}'``) binds a ZMQ PUB socket and sends each batch as three frames:
``(topic, seq as 8 bytes big-endian, msgpack payload)``; with a ``snapshot_endpoint`` in the
config the sequence frame is 24 bytes, the sequence and then 16 bytes naming the publisher's
lifetime, and an idle publisher sends an empty batch every second (both read here; the
snapshot socket is not used). Data-parallel rank ``r`` binds port ``5557 + r``; give one
``--endpoint`` per rank. Its optional ROUTER replay socket is not used: a gap in ``seq`` is
counted and reported, not filled.

With ``--snapshot-endpoint`` (one per ``--endpoint``, the config's ``snapshot_endpoint``), the
capture asks each publisher for its snapshot once its first live batch has arrived, as vLLM's
wire contract says (docs/features/kv_events.md, "Install a snapshot", at 0aa3ce8): a DEALER
sends one ``snapshot`` frame; the reply is the last batch's sequence (signed: -1 none yet, -2
unavailable), the publisher's 16-byte identity and the snapshot's ``KVEventBatch`` chunks, each
written as a frame of that sequence and topic ``snapshot``. The chunks are the engine's cache as
its events built it, so a capture that begins with them holds what the engine held
(``validate/events.engine_cache``, a warm start); live batches at or below the snapshot's
sequence repeat some of its events, which replaying the events absorbs.

Each batch is appended as one frame (:mod:`.framing`) with one write and flushed at once, so
whatever stops the capture -- Ctrl-C, ``--duration``, the publisher going away, the process
killed -- the file is valid up to its last whole frame.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from prefixscope.ingest.kvevents.framing import (
    MAGIC,
    FrameTail,
    NotACapture,
    encode_frame,
    read_frames,
)

#: How often the loop wakes to check the clock and the stop signal (ms).
POLL_MS = 50
#: How long a snapshot request waits for its reply (s) before the capture goes on without it.
SNAPSHOT_TIMEOUT_S = 30.0
#: A snapshot chunk's topic in the capture file (a live batch's is the publisher's own).
SNAPSHOT_TOPIC = b"snapshot"
#: The receive high-water mark: as many batches as vLLM's publisher queues by default.
RCVHWM = 100_000


@dataclass
class CaptureSummary:
    batches: int = 0
    bytes_written: int = 0
    missing: int = 0  # sequence numbers skipped between two received batches
    malformed: int = 0  # not (topic of at most 64 KiB, 8-byte seq, payload): not written
    vanished: list[str] = field(default_factory=list)  # endpoints whose publisher went away
    stopped_by: str = "duration"  # duration | interrupt | stop (a signal, the caller)
    seconds: float = 0.0
    snapshots: int = 0  # snapshots written (one per snapshot endpoint that answered)
    snapshot_batches: int = 0  # their chunks

    def line(self, out: Path) -> str:
        text = (
            f"captured {self.batches:,} batches ({self.bytes_written:,} bytes) into {out} in "
            f"{self.seconds:.1f} s, stopped by {self.stopped_by}; "
            f"{self.missing:,} missing sequence numbers"
        )
        if self.malformed:
            text += f"; {self.malformed:,} malformed messages skipped"
        if self.snapshots:
            text += f"; {self.snapshots} snapshots ({self.snapshot_batches:,} batches) first"
        return text


#: The longest topic a frame holds (its length is 16 bits); a longer one is a malformed message.
MAX_TOPIC_BYTES = 65_535
#: A batch's sequence frame: 8 bytes (the sequence, big-endian), or 24 when the publisher runs
#: a snapshot endpoint (the sequence, then 16 bytes naming the publisher's lifetime:
#: docs/features/kv_events.md, "Wire contract", in vLLM at 0aa3ce8).
SEQ_FRAMES = (8, 24)


#: A host ZMQ can connect to: a name or IPv4 address (letters, digits, ``.``, ``-``, ``_``), an
#: IPv6 address in brackets, or ``*`` (refused below as a bind address); ASCII only.
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]|\*")


def check_endpoint(endpoint: str) -> str:
    """``tcp://HOST:PORT`` (or ``ipc://PATH``), the address a subscriber connects to."""
    if endpoint.startswith("ipc://") and len(endpoint) > 6:
        return endpoint
    host, sep, port = endpoint.removeprefix("tcp://").rpartition(":")
    if (
        not endpoint.startswith("tcp://")
        or not sep
        or not _HOST.fullmatch(host)
        or not (port.isascii() and port.isdigit())
    ):
        raise ValueError(
            f"--endpoint {endpoint!r} is not tcp://HOST:PORT — give the publisher's address, "
            "e.g. tcp://127.0.0.1:5557"
        )
    if host == "*":
        raise ValueError(
            f"--endpoint {endpoint!r} is a bind address — give the engine's host and port, "
            "e.g. tcp://127.0.0.1:5557"
        )
    if len(port) > 5 or not 0 < int(port) < 65536:
        raise ValueError(
            f"--endpoint {endpoint!r}: port {port[:10]} is not a TCP port (1 to 65535) — give "
            "the publisher's port, e.g. tcp://127.0.0.1:5557"
        )
    return endpoint


def same_publisher(endpoints: list[str]) -> tuple[str, str] | None:
    """Two of ``endpoints`` that reach one publisher (the same address, or ``localhost`` and a
    loopback address on one port), whose every batch would be captured twice; None if none."""
    seen: dict[str, str] = {}
    for endpoint in endpoints:
        host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
        host = host.strip("[]").lower()
        if host in ("localhost", "127.0.0.1", "::1"):
            host = "loopback"
        key = endpoint if endpoint.startswith("ipc://") else f"{host}:{int(port)}"
        if key in seen:
            return seen[key], endpoint
        seen[key] = endpoint
    return None


def open_capture(out: Path) -> tuple[object, int]:
    """``out`` opened to append frames: a new file gets the header; an existing one must be a
    capture that ends with a whole frame. Returns the file and its frames so far."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a directory — give a file path")
    if out.exists() and out.stat().st_size:
        tails: list[FrameTail] = []
        with out.open("rb") as f:
            try:
                frames = sum(1 for _ in read_frames(f, str(out), tails))
            except NotACapture:
                raise ValueError(
                    f"--out {out} exists and is not a KV events capture — give a new path"
                ) from None
        if tails:
            raise ValueError(
                f"--out {out} ends inside a frame ({tails[0].detail}) — give a new path; "
                "`ingest --format vllm-events` still reads its whole frames"
            )
        return out.open("ab"), frames
    out.parent.mkdir(parents=True, exist_ok=True)
    f = out.open("wb")
    f.write(MAGIC)
    f.flush()
    return f, 0


def capture_events(
    endpoints: Sequence[str],
    out: Path,
    *,
    duration: float | None = None,
    topic: str = "",
    stop: threading.Event | None = None,
    notice: Callable[[str], None] = lambda line: None,
    snapshot_endpoints: Sequence[str] = (),
    snapshot_timeout_s: float = SNAPSHOT_TIMEOUT_S,
) -> CaptureSummary:
    """Append every batch the publishers at ``endpoints`` send on ``topic`` to ``out`` until
    ``duration`` seconds pass, ``stop`` is set or the process is interrupted (Ctrl-C); each
    publisher that goes away meanwhile is one ``notice`` line. ``snapshot_endpoints``: the
    publishers' snapshot sockets, in ``endpoints``' order, each asked once (module doc)."""
    endpoints = [check_endpoint(e) for e in endpoints]
    snapshot_endpoints = [check_endpoint(e) for e in snapshot_endpoints]
    if snapshot_endpoints and len(snapshot_endpoints) != len(endpoints):
        raise ValueError(
            f"{len(snapshot_endpoints)} --snapshot-endpoint for {len(endpoints)} --endpoint — "
            "give one per endpoint, in the same order"
        )
    asking = set(range(len(snapshot_endpoints)))  # the endpoints whose snapshot is still due
    summary = CaptureSummary()
    ctx = zmq.Context()
    sockets: list[zmq.Socket] = []
    monitors: dict[zmq.Socket, int] = {}
    poller = zmq.Poller()
    last_seq: dict[tuple[int, bytes], int] = {}
    start = time.monotonic()
    f = None
    try:
        for i, endpoint in enumerate(endpoints):
            # held before connecting: a socket left open would block the context's end
            sock = ctx.socket(zmq.SUB)
            sockets.append(sock)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, RCVHWM)
            sock.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
            monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            monitors[monitor] = i
            try:
                sock.connect(endpoint)
            except zmq.ZMQError as exc:
                raise ValueError(
                    f"--endpoint {endpoint!r}: ZMQ cannot connect to it ({exc}) — give the "
                    "publisher's address, e.g. tcp://127.0.0.1:5557"
                ) from None
            poller.register(sock, zmq.POLLIN)
            poller.register(monitor, zmq.POLLIN)
        f, _ = open_capture(out)  # after every endpoint is taken: a refused one writes nothing
        index = {s: i for i, s in enumerate(sockets)}
        while True:
            if stop is not None and stop.is_set():
                summary.stopped_by = "stop"
                break
            left = None if duration is None else duration - (time.monotonic() - start)
            if left is not None and left <= 0:
                break
            try:
                ready = dict(poller.poll(POLL_MS if left is None else min(POLL_MS, left * 1e3)))
                for sock in ready:
                    if sock in monitors:
                        _on_monitor(sock, endpoints[monitors[sock]], summary, notice)
                        continue
                    i = index[sock]
                    if _drain(f, sock, i, summary, last_seq) and i in asking:
                        asking.discard(i)  # live batches flow: the snapshot can be asked for
                        _snapshot(ctx, f, i, snapshot_endpoints[i], summary, notice,
                                  snapshot_timeout_s)  # fmt: skip
            except KeyboardInterrupt:
                summary.stopped_by = "interrupt"
                break
        if summary.stopped_by != "interrupt":  # what had arrived when it stopped is kept
            for sock in sockets:
                _drain(f, sock, index[sock], summary, last_seq)
    finally:
        summary.seconds = time.monotonic() - start
        if f is not None:
            f.close()
        for sock in sockets:
            sock.disable_monitor()
        for monitor in monitors:
            monitor.close(linger=0)
        for sock in sockets:
            sock.close(linger=0)
        ctx.term()
    return summary


def _drain(
    f: object,
    sock: zmq.Socket,
    endpoint: int,
    summary: CaptureSummary,
    last_seq: dict[tuple[int, bytes], int],
) -> int:
    """Write every message that has arrived on ``sock``, without waiting; how many."""
    n = 0
    while True:
        try:
            parts = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return n
        _write(f, endpoint, parts, summary, last_seq)
        n += 1


def _snapshot(  # noqa: PLR0913
    ctx: zmq.Context,
    f: object,
    endpoint: int,
    address: str,
    summary: CaptureSummary,
    notice: Callable[[str], None],
    timeout_s: float,
) -> None:
    """Ask the publisher at ``address`` for its snapshot and write its chunks (module doc);
    a publisher that does not answer, or answers that it has none, is one ``notice`` line."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(address)
        sock.send_multipart([SNAPSHOT_TOPIC])
        if not sock.poll(int(timeout_s * 1e3)):
            notice(f"the snapshot at {address} did not answer in {timeout_s:g} s: capturing "
                   "the live batches without it")  # fmt: skip
            return
        parts = sock.recv_multipart()
    finally:
        sock.close(linger=0)
    if len(parts) < 2 or len(parts[0]) != 8 or len(parts[1]) != 16:
        notice(f"the snapshot at {address} answered no snapshot reply ({len(parts)} frames): "
               "capturing the live batches without it")  # fmt: skip
        summary.malformed += 1
        return
    seq = int.from_bytes(parts[0], "big", signed=True)
    if seq == -2:
        notice(f"the publisher at {address} has no snapshot to give (its recorder is invalid; "
               "a restart recovers it): capturing the live batches without it")  # fmt: skip
        return
    received = time.time()
    for chunk in parts[2:]:
        frame = encode_frame(received, seq, endpoint, SNAPSHOT_TOPIC, chunk)
        f.write(frame)  # type: ignore[attr-defined]
        summary.bytes_written += len(frame)
        summary.snapshot_batches += 1
    f.flush()  # type: ignore[attr-defined]
    summary.snapshots += 1


def _write(
    f: object,
    endpoint: int,
    parts: list[bytes],
    summary: CaptureSummary,
    last_seq: dict[tuple[int, bytes], int],
) -> None:
    readable = len(parts) == 3 and len(parts[1]) in SEQ_FRAMES
    if readable:  # its sequence number counts even where the message is skipped below
        seq_frame = parts[1]
        seq = int.from_bytes(seq_frame[:8], "big", signed=True)
        # with snapshots on, 16 more bytes name the publisher's lifetime: a new one counts
        # from 0
        publisher = (endpoint, seq_frame[8:])
        previous = last_seq.get(publisher)
        if previous is not None and seq > previous + 1:
            summary.missing += seq - previous - 1
        last_seq[publisher] = seq  # a lower seq: the publisher restarted and counts from 0
    if not readable or len(parts[0]) > MAX_TOPIC_BYTES:
        summary.malformed += 1  # a frame stores its topic's length in 16 bits
        return
    topic, _, payload = parts
    frame = encode_frame(time.time(), seq, endpoint, topic, payload)
    f.write(frame)  # type: ignore[attr-defined]
    f.flush()  # type: ignore[attr-defined]
    summary.batches += 1
    summary.bytes_written += len(frame)


def _on_monitor(
    monitor: zmq.Socket, endpoint: str, summary: CaptureSummary, notice: Callable[[str], None]
) -> None:
    event = recv_monitor_message(monitor)
    if event["event"] == zmq.EVENT_DISCONNECTED:
        summary.vanished.append(endpoint)
        notice(
            f"the publisher at {endpoint} went away after {summary.batches:,} batches: the "
            "capture file is valid up to its last whole frame; waiting for it to return "
            "(Ctrl-C or --duration stops)"
        )

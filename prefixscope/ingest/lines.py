"""Read a line-oriented log file (plain or gzip) as Arrow batches of numbered raw lines.

No per-line Python: each chunk is split at its newlines with numpy and handed over as one
``large_binary`` Arrow array sharing the chunk's memory. Lines stay bytes here; decoding and
validation happen in the format's SQL, so bad bytes become a reject, never an exception.

A gzip stream that ends early (a log copied while it was written) keeps every complete line
read before the cut; the unreadable tail is reported as one more line (:class:`FileReadState`).
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import BinaryIO, TypeVar

import numpy as np
import pyarrow as pa

T = TypeVar("T")

GZIP_MAGIC = b"\x1f\x8b"
#: A UTF-8 byte-order mark: dropped from the start of a file (plain or decompressed) before its
#: first line is split; it still counts in the file's bytes and SHA-256.
UTF8_BOM = b"\xef\xbb\xbf"
DEFAULT_CHUNK_BYTES = 32 << 20
#: Compressed bytes fed to zlib per call: small, so a corrupt block loses little that came before.
GZIP_READ_BYTES = 64 << 10
#: Lines per Arrow record batch: several batches per chunk let DuckDB parse them in parallel.
ROWS_PER_RECORD_BATCH = 8192


@dataclass(frozen=True)
class LineBatch:
    """Consecutive lines of one file: ``table`` has columns ``line`` (1-based) and ``raw``."""

    table: pa.Table

    @property
    def num_lines(self) -> int:
        return self.table.num_rows


@dataclass
class FileReadState:
    """What reading a whole file found, filled in as its batches are consumed."""

    sha256: hashlib._Hash = field(default_factory=hashlib.sha256)
    bytes_read: int = 0
    lines: int = 0
    # Set when the stream could not be read to its end: (line number of the tail, reason text).
    truncated: tuple[int, str] | None = None

    @property
    def file_id(self) -> str:
        return self.sha256.hexdigest()


def _inflate(raw: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    """Decompress a gzip stream (one or more members) in bounded chunks. Everything that can be
    decompressed is yielded before an ``EOFError`` says the stream ended early."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = b""
    while True:
        if not pending:
            pending = raw.read(min(chunk_bytes, GZIP_READ_BYTES))
            if not pending:
                if d.eof:
                    return
                rest = d.flush()
                if rest:
                    yield rest
                raise EOFError("the gzip stream ends before its end-of-stream marker")
        if d.eof:  # the previous member is complete: what follows is another member or padding
            if not pending.strip(b"\x00"):
                pending = b""
                continue
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(pending, chunk_bytes)
        pending = d.unused_data if d.eof else d.unconsumed_tail
        if out:
            yield out


def _coalesce(pieces: Iterator[bytes], chunk_bytes: int) -> Iterator[bytes]:
    """Join small pieces into chunks of about ``chunk_bytes``; on a read error, what was
    joined so far still comes out before the error does."""
    buffer: list[bytes] = []
    size = 0
    try:
        for piece in pieces:
            buffer.append(piece)
            size += len(piece)
            if size >= chunk_bytes:
                yield b"".join(buffer)
                buffer, size = [], 0
    except (EOFError, zlib.error):
        if buffer:
            yield b"".join(buffer)
        raise
    if buffer:
        yield b"".join(buffer)


def _chunks(raw: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    """The file's bytes in chunks, decompressed when it starts with the gzip magic."""
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        yield from _coalesce(_inflate(raw, chunk_bytes), chunk_bytes)
    else:
        raw.seek(0)
        yield from iter(lambda: raw.read(chunk_bytes), b"")


def holds_text(path: Path, chunk_bytes: int = 1 << 20) -> bool:
    """Whether the file holds anything but whitespace (a gzip file once inflated). It reads
    only up to the first such byte; a stream that breaks counts as text, for ingest to name."""
    with path.open("rb") as raw:
        try:
            return any(chunk.strip() for chunk in _chunks(raw, chunk_bytes))
        except (EOFError, zlib.error):
            return True


def first_line(path: Path, limit: int = 1 << 20) -> bytes | None:
    """The file's first line that holds anything but whitespace (a gzip file once inflated),
    None when there is none within ``limit`` bytes or the stream breaks before it."""
    seen = b""
    with path.open("rb") as raw:
        try:
            for chunk in _chunks(raw, 1 << 16):
                seen += chunk
                lines = seen.split(b"\n")
                for line in lines[:-1]:
                    if line.strip():
                        return line
                if len(seen) > limit:
                    return None
                seen = lines[-1]
        except (EOFError, zlib.error):
            return None
    return seen if seen.strip() else None


def prefetch(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Yield ``items`` while a background thread already produces the next ``depth`` of them.

    Reading (decompression, newline search, hashing) releases the GIL, so it overlaps with the
    caller's parsing on another core. An exception in the producer is raised to the caller.
    """
    queue: Queue[tuple[bool, object]] = Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                queue.put((True, item))
        except BaseException as exc:  # handed to the consumer, never lost
            queue.put((False, exc))
            return
        queue.put((False, None))

    worker = threading.Thread(target=produce, name="prefixscope-read", daemon=True)
    worker.start()
    try:
        while True:
            ok, item = queue.get()
            if not ok:
                if item is not None:
                    raise item  # type: ignore[misc]
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                queue.get_nowait()
            except Empty:
                worker.join(0.01)


def _split(buf: bytes | memoryview, first_line: int) -> LineBatch:
    """Split ``buf`` (whole lines, each ending in b'\\n' except maybe the last) into a batch."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(arr == 0x0A) + 1
    if ends.size == 0 or ends[-1] != len(buf):
        ends = np.append(ends, len(buf))
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    n = len(offsets) - 1
    raw = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)]
    )
    line = pa.array(np.arange(first_line, first_line + n, dtype=np.int64))
    whole = pa.RecordBatch.from_arrays([line, raw], names=["line", "raw"])
    return LineBatch(
        pa.Table.from_batches(
            [whole.slice(i, ROWS_PER_RECORD_BATCH) for i in range(0, n, ROWS_PER_RECORD_BATCH)],
            schema=whole.schema,
        )
    )


def read_line_batches(
    path: Path, state: FileReadState, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[LineBatch]:
    """Yield the lines of ``path`` in order, updating ``state`` as it goes.

    A trailing newline at the end of the file does not make an extra empty line. When the
    stream breaks, a final batch holds the partial tail (if any bytes of it were read) and
    ``state.truncated`` names its line number and the reason.
    """
    carry = b""
    next_line = 1
    first = True
    with path.open("rb") as raw:
        chunks = _chunks(raw, chunk_bytes)
        while True:
            try:
                chunk = next(chunks, b"")
            except (EOFError, zlib.error) as exc:
                state.truncated = (next_line, f"{type(exc).__name__}: {exc}")
                break
            if not chunk:
                break
            state.sha256.update(chunk)
            state.bytes_read += len(chunk)
            data = carry + chunk
            if first and len(data) >= len(UTF8_BOM):
                first = False
                if data.startswith(UTF8_BOM):
                    data = data[len(UTF8_BOM) :]
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                batch = _split(memoryview(data)[:cut], next_line)  # a view: no copy
                next_line += batch.num_lines
                state.lines += batch.num_lines
                yield batch
    if first and carry.startswith(UTF8_BOM):
        carry = carry[len(UTF8_BOM) :]
    if carry:
        batch = _split(carry, next_line)
        state.lines += batch.num_lines
        yield batch
    elif state.truncated is not None:
        # The cut fell on a line boundary: the lost tail is still one line that was not read.
        state.lines += 1

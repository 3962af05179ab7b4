"""The capture file: the raw batches of a KV events publisher, one length-prefixed frame each.

Layout (every integer big-endian, as vLLM's own sequence numbers are)::

    file   = MAGIC frame*
    frame  = length:u32 crc:u32 body            length = len(body), crc = CRC-32 of body
    body   = received:f64 seq:i64 endpoint:u16 topic_len:u16 topic payload

``received`` is the capture's clock (Unix seconds) when the batch arrived, ``seq`` the
publisher's sequence number (its second ZMQ frame), ``endpoint`` the index of the endpoint it
came from (in the order ``capture-events --endpoint`` named them), ``topic`` the publisher's
topic (its first ZMQ frame) and ``payload`` its third frame, the msgpack-encoded
``KVEventBatch``, byte for byte as it was sent.

Invariant: a frame is written with one ``write`` and flushed before the next is received, so
a capture that stops in any way (the publisher gone, the process killed, the disk full) leaves
a file that is valid up to its last whole frame; :func:`read_frames` says where a cut-short
tail starts and reads everything before it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

#: The first bytes of every capture file (the trailing 1 is the layout's version).
MAGIC = b"PSKVEV\x00\x01"
_HEAD = struct.Struct(">II")  # length, crc
_BODY = struct.Struct(">dqHH")  # received, seq, endpoint, topic_len
#: A frame longer than this is not one the capture wrote (a corrupt length field).
MAX_FRAME_BYTES = 1 << 30


@dataclass(frozen=True)
class Frame:
    """One captured batch: ``index`` counts frames from 1 in file order."""

    index: int
    received: float
    seq: int
    endpoint: int
    topic: bytes
    payload: bytes


@dataclass(frozen=True)
class FrameTail:
    """Why reading stopped before the end of the file: ``kind`` is ``truncated`` (the last
    frame is cut short) or ``corrupt`` (a frame's length or checksum is wrong: nothing after it
    can be trusted); ``frame`` is the index the bad frame would have had, ``offset`` its byte
    offset."""

    kind: str
    frame: int
    offset: int
    detail: str


class NotACapture(ValueError):
    """A file that does not start with :data:`MAGIC`: nothing in it can be read."""


def encode_frame(received: float, seq: int, endpoint: int, topic: bytes, payload: bytes) -> bytes:
    """The bytes of one frame."""
    body = _BODY.pack(received, seq, endpoint, len(topic)) + topic + payload
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def check_magic(f: BinaryIO, name: str) -> None:
    """Raise :class:`NotACapture` unless ``f`` (at its start) begins with :data:`MAGIC`."""
    head = f.read(len(MAGIC))
    if head != MAGIC:
        raise NotACapture(
            f"{name} is not a KV events capture (it does not start with the capture header) — "
            "give a file written by `prefixscope capture-events`"
        )


def read_frames(f: BinaryIO, name: str, tails: list[FrameTail]) -> Iterator[Frame]:
    """The whole frames of the capture ``f`` in file order. Where the file ends inside a frame,
    or a frame is corrupt, one :class:`FrameTail` is appended to ``tails`` and reading stops."""
    check_magic(f, name)
    offset = len(MAGIC)
    index = 0
    while True:
        index += 1
        head = f.read(_HEAD.size)
        if not head:
            return
        if len(head) < _HEAD.size:
            tails.append(FrameTail("truncated", index, offset, "the file ends inside a header"))
            return
        length, crc = _HEAD.unpack(head)
        if length < _BODY.size or length > MAX_FRAME_BYTES:
            tails.append(FrameTail("corrupt", index, offset, f"a frame length of {length:,} bytes"))
            return
        body = f.read(length)
        if len(body) < length:
            tails.append(
                FrameTail(
                    "truncated",
                    index,
                    offset,
                    f"the file ends {length - len(body):,} bytes before the frame does",
                )
            )
            return
        if zlib.crc32(body) != crc:
            tails.append(FrameTail("corrupt", index, offset, "the frame's checksum is wrong"))
            return
        received, seq, endpoint, topic_len = _BODY.unpack_from(body)
        start = _BODY.size
        if start + topic_len > length:
            tails.append(FrameTail("corrupt", index, offset, "a topic longer than its frame"))
            return
        topic = body[start : start + topic_len]
        yield Frame(index, received, seq, endpoint, topic, body[start + topic_len :])
        offset += _HEAD.size + length

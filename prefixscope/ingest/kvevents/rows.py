"""A capture file's events as ``kv_events`` rows (one per block) and ``rejects``.

Each stored block also gets its prefixscope block id: the chained hash that
:mod:`prefixscope.ingest.hashing` gives the same block of a prompt (same block size, same
chaining, no salt), computed from the event's token ids and its parent's id, so the row joins
the ``requests`` table's ``block_hashes``. The parent's id is the one an earlier ``BlockStored``
of the same capture gave the parent's engine hash; a chain whose parent was stored before the
capture began cannot be chained, and its rows say NULL. Removed blocks take the id their store
gave them. Token ids are used for that and dropped: none is kept.

**Chunks of an offload tier.** LMCache stores a prompt in chunks of ``chunk_size`` tokens (256 by
default) and publishes each stored chunk through vLLM's publisher as a ``BlockStored`` of one
hash, medium ``cpu``, the chunk's tokens and its token count as the block size, its parent the
chunk before (``lmcache/v1/cache_engine.py``, ``LMCacheEngine.store``, LMCache/LMCache at
000620e37eb7e8e54bd6f0aa0809b7dbef8a11e8). A stored event of a tier other than the GPU pool whose
block size is not the warehouse's is read as such a chunk: its tokens are cut into the
warehouse's blocks (the largest warehouse block size under the chunk's), one row each, with the
chunk's engine hash, chained as the prompt's own blocks are; tokens past the last whole block
(a short last chunk) are no block, as a prompt's partial tail is none. The GPU pool's events
keep the warehouse's block size exactly: ``validate --events`` compares that pool block by
block.

Counting (``sources``): for this format a "line" is one event (``BlockStored`` and
``BlockRemoved`` land as one row per block, ``AllBlocksCleared`` as one row), or one whole batch
or file tail that cannot be read; so ``lines = accepted + rejected`` holds, and a reject's
``source.line`` is the frame number (its detail names the event).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from prefixscope.ingest.formats.base import MAX_ARRIVAL_US, MIN_ARRIVAL_US
from prefixscope.ingest.hashing import ROOT, xxh64
from prefixscope.ingest.kvevents.framing import FrameTail, read_frames
from prefixscope.ingest.kvevents.wire import (
    DEFAULT_MEDIUM,
    BatchProblem,
    Cleared,
    EventProblem,
    Removed,
    Stored,
    decode_batch,
)

FORMAT = "vllm-events"
#: One row per block, in the publisher's order (frame, event_index, block_index).
ROW_SCHEMA = pa.schema(
    [
        ("frame", pa.int64()),
        ("seq", pa.int64()),
        ("event_index", pa.int32()),
        ("block_index", pa.int32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("received_ts", pa.timestamp("us", tz="UTC")),
        ("rank", pa.int32()),
        ("kind", pa.string()),
        ("engine_block_hash", pa.binary()),
        ("engine_parent_hash", pa.binary()),
        ("block_size", pa.int32()),
        ("medium", pa.string()),
        ("block_id", pa.uint64()),
    ]
)
REJECT_SCHEMA = pa.schema([("line", pa.int64()), ("reason", pa.string()), ("detail", pa.string())])
TAIL_REASONS = {"truncated": "truncated_file", "corrupt": "corrupt_frame"}


@dataclass
class ParsedCapture:
    """What one capture file holds: rows and rejects, and the counts ``sources`` keeps."""

    rows: pa.Table
    rejects: pa.Table
    frames: int
    bytes_read: int
    tail: FrameTail | None
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return self.rows.num_rows

    @property
    def rejected(self) -> int:
        return self.rejects.num_rows

    @property
    def stored(self) -> int:
        """Stored blocks that landed."""
        return int(np.count_nonzero(np.asarray(self.rows["kind"].to_pylist()) == "stored"))

    @property
    def unlinked(self) -> int:
        """Stored blocks without a prefixscope id (their chain began before the capture)."""
        kind = np.asarray(self.rows["kind"].to_pylist(), dtype=object)
        ids = self.rows["block_id"]
        return int(np.count_nonzero((kind == "stored") & np.asarray(ids.is_null())))


def chained_ids(parent: int, token_ids: tuple[int, ...], block_size: int) -> list[int]:
    """The prefixscope ids of the blocks ``token_ids`` holds (``block_size`` tokens each) after
    the block whose id is ``parent`` (``ROOT`` for a prompt's first block): the chaining of
    :func:`prefixscope.ingest.hashing.hash_token_blocks`, started from any parent."""
    tokens = np.asarray(token_ids, dtype="<u4").view(np.uint8)
    width = 4 * block_size
    scratch = np.empty(8 + width, np.uint8)
    out = []
    for b in range(len(token_ids) // block_size):
        scratch[:8] = np.array([parent], dtype="<u8").view(np.uint8)
        scratch[8:] = tokens[b * width : (b + 1) * width]
        parent = int(xxh64(scratch, scratch.size, np.uint64(0)))
        out.append(parent)
    return out


class _Builder:
    """Accumulates rows column by column; the chain map lives here."""

    def __init__(self, block_sizes: frozenset[int] | None) -> None:
        self.block_sizes = block_sizes
        self.columns: dict[str, list[object]] = {f.name: [] for f in ROW_SCHEMA}
        self.rejects: dict[str, list[object]] = {f.name: [] for f in REJECT_SCHEMA}
        self.ids: dict[bytes, int] = {}  # engine hash -> prefixscope id (content: any rank)
        self.refused: set[bytes] = set()  # engine hashes whose store was rejected
        #: a chunk's engine hash -> the ids of the warehouse blocks it holds (its removal's rows)
        self.chunks: dict[bytes, list[int | None]] = {}

    def reject(self, line: int, reason: str, detail: str) -> None:
        for name, value in (("line", line), ("reason", reason), ("detail", detail)):
            self.rejects[name].append(value)

    def row(self, **values: object) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))

    def batch(self, frame: int, seq: int, received: float, payload: bytes) -> None:
        try:
            batch = decode_batch(payload)
        except BatchProblem as exc:
            self.reject(frame, exc.reason, f"batch seq {seq}: {exc.detail}")
            return
        # compared as floats first: ts 1e308 (or a receive time of inf) rounds to no integer
        if not MIN_ARRIVAL_US <= batch.ts * 1e6 < MAX_ARRIVAL_US:
            self.reject(frame, "malformed_batch", f"batch seq {seq}: ts outside 1970..2100")
            return
        if not MIN_ARRIVAL_US <= received * 1e6 < MAX_ARRIVAL_US:
            self.reject(frame, "corrupt_frame", f"batch seq {seq}: its receive time is no time")
            return
        common = {
            "frame": frame,
            "seq": seq,
            "ts": round(batch.ts * 1e6),
            "received_ts": round(received * 1e6),
            "rank": 0 if batch.rank is None else batch.rank,
        }
        for e, event in enumerate(batch.events):
            where = f"batch seq {seq}, event {e}"
            if isinstance(event, EventProblem):
                self.reject(frame, event.reason, f"{where}: {event.detail}")
            elif isinstance(event, Stored):
                self.stored(frame, where, event, {**common, "event_index": e})
            elif isinstance(event, Removed):
                self.removed(frame, where, event, {**common, "event_index": e})
            elif isinstance(event, Cleared):
                self.row(**common, event_index=e, block_index=0, kind="cleared")

    def chunk_unit(self, ev: Stored) -> int | None:
        """The warehouse block size that an offload tier's chunk ``ev`` is cut into, or None
        where ``ev`` is no such chunk (the module docstring)."""
        if self.block_sizes is None or ev.medium == DEFAULT_MEDIUM or not ev.token_ids:
            return None
        if len(ev.token_ids) != ev.block_size * len(ev.hashes):
            return None
        below = [s for s in self.block_sizes if s < ev.block_size]
        return max(below) if below else None

    def chunk(self, ev: Stored, unit: int, common: dict[str, object]) -> None:
        """One row per whole warehouse block of each chunk in ``ev``, the chunk's hash on each;
        a chunk is a parent only where it ends on a block boundary (a short last chunk is no
        parent: the next chunk of its prompt starts where it did, under another hash)."""
        parent = int(ROOT) if ev.parent is None else self.ids.get(ev.parent)
        size = ev.block_size
        for c, h in enumerate(ev.hashes):
            tokens = ev.token_ids[c * size : (c + 1) * size]
            ids: list[int | None]
            if parent is not None:
                ids = list(chained_ids(parent, tokens, unit))
            else:  # a chain begun before the capture (or a parent LMCache did not name)
                ids = [None] * (size // unit)
            self.chunks[h] = ids
            self.refused.discard(h)
            parent = ids[-1] if ids and size % unit == 0 else None
            if parent is not None:
                self.ids[h] = parent
            for b, block_id in enumerate(ids):
                self.row(
                    **common,
                    block_index=c * (size // unit) + b,
                    kind="stored",
                    engine_block_hash=h,
                    engine_parent_hash=ev.parent if c == 0 else ev.hashes[c - 1],
                    block_size=unit,
                    medium=ev.medium,
                    block_id=block_id,
                )

    def stored(self, frame: int, where: str, ev: Stored, common: dict[str, object]) -> None:
        if self.block_sizes is not None and ev.block_size not in self.block_sizes:
            unit = self.chunk_unit(ev)
            if unit is not None:  # an offload tier's chunk (the module docstring)
                self.chunk(ev, unit, common)
                return
            self.refused.update(ev.hashes)
            sizes = ", ".join(str(s) for s in sorted(self.block_sizes))
            self.reject(
                frame,
                "block_size_mismatch",
                f"{where}: blocks of {ev.block_size} tokens; the warehouse's are {sizes} "
                "(ingest the requests with --block-size of the engine)",
            )
            return
        if ev.token_ids and len(ev.token_ids) != ev.block_size * len(ev.hashes):
            self.reject(
                frame,
                "token_count_mismatch",
                f"{where}: {len(ev.token_ids)} token ids for {len(ev.hashes)} blocks of "
                f"{ev.block_size}",
            )
            return
        parent = int(ROOT) if ev.parent is None else self.ids.get(ev.parent)
        ids: list[int | None]
        if ev.token_ids and parent is not None:
            ids = list(chained_ids(parent, ev.token_ids, ev.block_size))
        else:  # no tokens (an offloaded copy), or a chain older than the capture
            ids = [self.ids.get(h) for h in ev.hashes]
        previous = ev.parent
        for b, (h, block_id) in enumerate(zip(ev.hashes, ids, strict=True)):
            if block_id is not None:
                self.ids[h] = block_id
            self.refused.discard(h)
            self.row(
                **common,
                block_index=b,
                kind="stored",
                engine_block_hash=h,
                engine_parent_hash=previous,
                block_size=ev.block_size,
                medium=ev.medium,
                block_id=block_id,
            )
            previous = h

    def removed(self, frame: int, where: str, ev: Removed, common: dict[str, object]) -> None:
        refused = [h for h in ev.hashes if h in self.refused]
        if refused:
            self.reject(
                frame,
                "block_size_mismatch",
                f"{where}: removes {len(refused)} block(s) whose store was rejected for its "
                "block size",
            )
        b = 0
        for h in ev.hashes:
            if h in self.refused:
                continue
            # a chunk's removal removes each warehouse block it held
            for block_id in self.chunks.get(h, [self.ids.get(h)]):
                self.row(
                    **common,
                    block_index=b,
                    kind="removed",
                    engine_block_hash=h,
                    medium=ev.medium,
                    block_id=block_id,
                )
                b += 1

    def tables(self) -> tuple[pa.Table, pa.Table]:
        rows = pa.table(
            {f.name: pa.array(self.columns[f.name], f.type) for f in ROW_SCHEMA},
            schema=ROW_SCHEMA,
        )
        rejects = pa.table(
            {f.name: pa.array(self.rejects[f.name], f.type) for f in REJECT_SCHEMA},
            schema=REJECT_SCHEMA,
        )
        return rows, rejects


def parse_capture(
    path: Path,
    block_sizes: Iterable[int] | None = None,
    seen: set[tuple[int, bytes]] | None = None,
) -> ParsedCapture:
    """Every frame of the capture at ``path``, decoded into rows and rejects. ``block_sizes``:
    the block sizes a stored event may have (the warehouse's); None: any. ``seen``: the batches
    (seq, digest) of the files read before it in one ingest, updated: a batch one of them holds
    is a duplicate here too. Raises :class:`~prefixscope.ingest.kvevents.framing.NotACapture`
    for a file that is no capture."""
    builder = _Builder(None if block_sizes is None else frozenset(block_sizes))
    tails: list[FrameTail] = []
    frames = 0
    seen = set() if seen is None else seen
    with path.open("rb") as f:
        for frame in read_frames(f, str(path), tails):
            frames += 1
            # one batch written twice (one publisher captured through two endpoints, or by two
            # captures into one file) would double its events. A batch's bytes hold its time
            # and rank, so another batch never repeats them, even where a restarted
            # publisher's seq does
            key = (frame.seq, hashlib.blake2b(frame.payload).digest())
            if key in seen:
                builder.reject(
                    frame.index,
                    "duplicate_batch",
                    f"batch seq {frame.seq} (endpoint {frame.endpoint}) is in this ingest's "
                    "captures already, byte for byte: counted once",
                )
                continue
            seen.add(key)
            builder.batch(frame.index, frame.seq, frame.received, frame.payload)
    size = path.stat().st_size
    tail = tails[0] if tails else None
    if tail is not None:
        builder.reject(
            tail.frame,
            TAIL_REASONS[tail.kind],
            f"frame {tail.frame} at byte {tail.offset:,}: {tail.detail}; the frames before "
            "were kept",
        )
    rows, rejects = builder.tables()
    reasons: dict[str, int] = {}
    for r in rejects["reason"].to_pylist():
        reasons[r] = reasons.get(r, 0) + 1
    return ParsedCapture(rows, rejects, frames, size, tail, reasons)

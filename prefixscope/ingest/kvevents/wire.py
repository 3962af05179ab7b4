"""vLLM's KV cache events on the wire: one ``KVEventBatch`` payload decoded, field by field.

Follows ``vllm/distributed/kv_events.py`` (vllm-project/vllm). The structs are msgspec
``Struct``\\ s with ``tag=True`` (the tag is the class name) and ``omit_defaults=True``; vLLM
has encoded them two ways, and both are read:

- **arrays** (``array_like=True``; commit b4e69e0af33f4698e157a262cc787fe61983cd3d and the
  releases after it): a batch is ``[ts, events]`` or ``[ts, events, data_parallel_rank]``, an
  event ``[tag, field, ...]`` in declaration order, trailing fields at their default omitted;
- **maps** (commit 0181ea3173e53eea8cf04a86891488e3dc89bb34, the newest read): a batch is
  ``{"ts", "events", "data_parallel_rank"}``, an event ``{"type": tag, field: value, ...}``.
  Some versions between mix them (an array batch of map events); each level is read by itself.

The fields, in declaration order::

    KVEventBatch      ts: float, events: list, data_parallel_rank: int | None = None
    BlockStored       block_hashes, parent_block_hash, token_ids: list[int], block_size: int,
                      lora_id: int | None, medium: str | None, lora_name, extra_keys, group_idx...
    BlockRemoved      block_hashes, medium: str | None, group_idx...
    AllBlocksCleared  (no fields)

The oldest ``BlockStored`` ends at ``lora_id`` and ``BlockRemoved`` at ``block_hashes`` (no
``medium``: those versions published the GPU pool only). A block hash
(``ExternalBlockHash = bytes | int``) is bytes (the hash function's digest) or, with
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` and in old versions, an int (its low 64 bits; old
versions' Python ``hash()`` may be negative). :func:`engine_hash` gives both one form: bytes as
they are, an int as its 8-byte big-endian two's complement.

Nothing here raises on bad input except :class:`BatchProblem` (the batch is unusable); an event
that cannot be read is an :class:`EventProblem` in the batch's place, so its neighbours land.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

#: The tag field of msgspec's map encoding of a tagged struct (its default ``tag_field``).
TAG_FIELD = "type"
STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
)
REMOVED_FIELDS = ("block_hashes", "medium")
#: Where no medium is sent (the oldest versions): they published the GPU pool's events only.
DEFAULT_MEDIUM = "GPU"
#: The longest block hash accepted, in bytes (a SHA-256 digest is 32).
MAX_HASH_BYTES = 64


@dataclass(frozen=True)
class Stored:
    """``BlockStored``: blocks ``hashes`` (a chain, first to last) now cached; the first one's
    parent is ``parent`` (None: it starts a prompt); ``token_ids`` cover all of them."""

    hashes: tuple[bytes, ...]
    parent: bytes | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None
    medium: str


@dataclass(frozen=True)
class Removed:
    """``BlockRemoved``: blocks ``hashes`` evicted from ``medium``, in the engine's order."""

    hashes: tuple[bytes, ...]
    medium: str


@dataclass(frozen=True)
class Cleared:
    """``AllBlocksCleared``: every block of the publisher's pool is gone (a cache reset)."""


@dataclass(frozen=True)
class EventProblem:
    """An event that could not be read: a reject reason and a short detail (never its data)."""

    reason: str
    detail: str


Event = Stored | Removed | Cleared | EventProblem


@dataclass(frozen=True)
class Batch:
    ts: float
    rank: int | None
    events: tuple[Event, ...]


class BatchProblem(ValueError):
    """A payload that is not a readable ``KVEventBatch``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_decoder = msgspec.msgpack.Decoder()


def decode_batch(payload: bytes) -> Batch:
    """The batch in ``payload`` (either encoding); raises :class:`BatchProblem`."""
    try:
        raw = _decoder.decode(payload)
    except (msgspec.DecodeError, ValueError) as exc:
        raise BatchProblem("undecodable_batch", f"not msgpack: {str(exc)[:120]}") from None
    except RecursionError:  # arrays nested thousands deep: no batch is
        raise BatchProblem("undecodable_batch", "nested too deep to be a batch") from None
    if isinstance(raw, list):
        if len(raw) not in (2, 3):
            raise BatchProblem("malformed_batch", f"a batch array of {len(raw)} fields, not 2-3")
        ts, events, rank = raw[0], raw[1], raw[2] if len(raw) == 3 else None
    elif isinstance(raw, dict):
        if "ts" not in raw or "events" not in raw:
            raise BatchProblem("malformed_batch", "a batch map without ts or events")
        ts, events, rank = raw["ts"], raw["events"], raw.get("data_parallel_rank")
    else:
        raise BatchProblem("malformed_batch", f"a batch that is a {_kind(raw)}")
    if not _number(ts):
        raise BatchProblem("malformed_batch", f"ts is a {_kind(ts)}, not a number")
    if not math.isfinite(float(ts)):
        raise BatchProblem("malformed_batch", f"ts is {float(ts)}, not a time")
    if not isinstance(events, list):
        raise BatchProblem("malformed_batch", f"events is a {_kind(events)}, not a list")
    if rank is not None and not (_int(rank) and 0 <= rank < 1 << 31):
        raise BatchProblem("malformed_batch", "data_parallel_rank is not a rank (an int >= 0)")
    return Batch(float(ts), rank, tuple(decode_event(e) for e in events))


def decode_event(raw: Any) -> Event:
    """One event, either encoding; an :class:`EventProblem` when it cannot be read."""
    if isinstance(raw, list) and raw:
        tag, fields = raw[0], _fields_of_array(raw)
    elif isinstance(raw, dict) and TAG_FIELD in raw:
        tag, fields = raw[TAG_FIELD], raw
    else:
        return EventProblem("malformed_event", f"an event that is a {_kind(raw)} without a tag")
    if tag == "BlockStored":
        return _stored(fields)
    if tag == "BlockRemoved":
        return _removed(fields)
    if tag == "AllBlocksCleared":
        return Cleared()
    shown = tag[:40] if isinstance(tag, str) else _kind(tag)
    return EventProblem("unknown_event_tag", f"an event tagged {shown!r}")


def engine_hash(value: Any) -> bytes | None:
    """A block hash in one form (bytes), or None when ``value`` is not one."""
    if isinstance(value, bytes) and 0 < len(value) <= MAX_HASH_BYTES:
        return value
    if _int(value) and -(1 << 63) <= value < 1 << 64:
        return (value & ((1 << 64) - 1)).to_bytes(8, "big")
    return None


def _fields_of_array(raw: list[Any]) -> dict[str, Any]:
    names = STORED_FIELDS if raw[0] == "BlockStored" else REMOVED_FIELDS
    return dict(zip(names, raw[1:], strict=False))


def _stored(f: dict[str, Any]) -> Event:
    missing = [n for n in STORED_FIELDS[:4] if n not in f]
    if missing:
        return EventProblem("malformed_event", f"BlockStored without {', '.join(missing)}")
    hashes = _hashes(f["block_hashes"])
    if hashes is None:
        return EventProblem("malformed_event", "BlockStored whose block_hashes are not hashes")
    parent = f["parent_block_hash"]
    parent_hash = None if parent is None else engine_hash(parent)
    if parent is not None and parent_hash is None:
        return EventProblem("malformed_event", "BlockStored whose parent_block_hash is no hash")
    tokens = f["token_ids"]
    if not isinstance(tokens, list) or not all(_int(t) and 0 <= t < 1 << 32 for t in tokens):
        return EventProblem("malformed_event", "BlockStored whose token_ids are not token ids")
    size = f["block_size"]
    if not (_int(size) and 0 < size <= 1 << 20):
        return EventProblem("malformed_event", "BlockStored whose block_size is not a size")
    lora = f.get("lora_id")
    if lora is not None and not _int(lora):
        return EventProblem("malformed_event", "BlockStored whose lora_id is not an int")
    medium = _medium(f.get("medium"))
    if medium is None:
        return EventProblem("malformed_event", "BlockStored whose medium is not a string")
    return Stored(hashes, parent_hash, tuple(tokens), size, lora, medium)


def _removed(f: dict[str, Any]) -> Event:
    if "block_hashes" not in f:
        return EventProblem("malformed_event", "BlockRemoved without block_hashes")
    hashes = _hashes(f["block_hashes"])
    if hashes is None:
        return EventProblem("malformed_event", "BlockRemoved whose block_hashes are not hashes")
    medium = _medium(f.get("medium"))
    if medium is None:
        return EventProblem("malformed_event", "BlockRemoved whose medium is not a string")
    return Removed(hashes, medium)


def _hashes(value: Any) -> tuple[bytes, ...] | None:
    if not isinstance(value, list):
        return None
    out = tuple(engine_hash(v) for v in value)
    return None if any(h is None for h in out) else out  # type: ignore[return-value]


def _medium(value: Any) -> str | None:
    if value is None:
        return DEFAULT_MEDIUM
    if isinstance(value, str) and 0 < len(value) <= 32:
        return value.upper()
    return None


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return (_int(value) or isinstance(value, float)) and value == value  # not NaN


def _kind(value: Any) -> str:
    return {list: "list", dict: "map", str: "string", bytes: "binary"}.get(
        type(value), type(value).__name__
    )

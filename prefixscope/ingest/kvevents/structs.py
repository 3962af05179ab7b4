"""vLLM's KV event structs, declared as msgspec declares them there, to *write* the wire format
(the synthetic publisher of the tests and the worked check ``benchmarks/validate_events.py``).
Reading goes through :mod:`.wire`, which decodes without these types, so that a field it does
not know, an unknown tag or a bad value becomes a reject instead of a failed batch.

Two encodings, as two sets of the same fields (``vllm/distributed/kv_events.py``):
``ARRAY`` as at commit b4e69e0af33f (``array_like=True``: tagged arrays, tag first) with the
``medium`` and ``data_parallel_rank`` fields of the releases after it, and ``MAP`` as at commit
0181ea3173e5 (tagged maps, ``{"type": "BlockStored", ...}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

ExternalBlockHash = bytes | int


class ArrayBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class ArrayEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base of the array-encoded events."""


class ArrayBlockStored(ArrayEvent, tag="BlockStored"):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class ArrayBlockRemoved(ArrayEvent, tag="BlockRemoved"):
    block_hashes: list[ExternalBlockHash]
    medium: str | None


class ArrayAllBlocksCleared(ArrayEvent, tag="AllBlocksCleared"):
    pass


class MapBatch(msgspec.Struct, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class MapEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the map-encoded events."""


class MapBlockStored(MapEvent, tag="BlockStored"):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None


class MapBlockRemoved(MapEvent, tag="BlockRemoved"):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None


class MapAllBlocksCleared(MapEvent, tag="AllBlocksCleared"):
    pass


@dataclass(frozen=True)
class Encoding:
    batch: type
    stored: type
    removed: type
    cleared: type


ENCODINGS = {
    "array": Encoding(ArrayBatch, ArrayBlockStored, ArrayBlockRemoved, ArrayAllBlocksCleared),
    "map": Encoding(MapBatch, MapBlockStored, MapBlockRemoved, MapAllBlocksCleared),
}
_encoder = msgspec.msgpack.Encoder()


def stored(
    encoding: str,
    hashes: list[ExternalBlockHash],
    parent: ExternalBlockHash | None,
    token_ids: list[int],
    block_size: int,
    medium: str | None = "GPU",
) -> Any:
    cls = ENCODINGS[encoding].stored
    extra = {"lora_name": None} if encoding == "map" else {}
    return cls(hashes, parent, token_ids, block_size, None, medium, **extra)


def removed(encoding: str, hashes: list[ExternalBlockHash], medium: str | None = "GPU") -> Any:
    return ENCODINGS[encoding].removed(hashes, medium)


def cleared(encoding: str) -> Any:
    return ENCODINGS[encoding].cleared()


def encode_batch(encoding: str, ts: float, events: list[Any], rank: int | None = None) -> bytes:
    """The payload vLLM's publisher sends for one ``KVEventBatch``."""
    return _encoder.encode(ENCODINGS[encoding].batch(ts, events, rank))

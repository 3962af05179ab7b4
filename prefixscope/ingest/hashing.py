"""Chained block hashing, as a prefix cache names its blocks.

A block's hash covers its parent's hash, its own content and, for the first block only, any
extra keys (a tenant salt): ``h_i = xxh64(h_{i-1} ‖ extra_i ‖ content_i)``, with ``h_{-1} = 0``,
every field little-endian, token ids as 4-byte unsigned ints. So equal hashes mean equal
prefixes, and salted tenants never share a block. This is the structure of vLLM's automatic
prefix caching (``hash_block_tokens(parent, tokens, extra_keys)``) with xxHash64 as the hash
function; xxHash64 is the published algorithm, so any implementation reproduces these values on
any machine (the tests check this one against the ``xxhash`` package).

Token sources hash only *full* blocks: a partial tail block is never cached by the engine, so it
gets no hash (its tokens still count in ``input_tokens``).
"""

from __future__ import annotations

import numba
import numpy as np

P1 = np.uint64(0x9E3779B185EBCA87)
P2 = np.uint64(0xC2B2AE3D27D4EB4F)
P3 = np.uint64(0x165667B19E3779F9)
P4 = np.uint64(0x85EBCA77C2B2AE63)
P5 = np.uint64(0x27D4EB2F165667C5)
ROOT = np.uint64(0)  # the parent of every first block


@numba.njit(inline="always")
def _rotl(x, r):  # type: ignore[no-untyped-def]
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _read64(buf, p):  # type: ignore[no-untyped-def]
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(buf[p + i]) << np.uint64(8 * i)
    return v


@numba.njit(inline="always")
def _round(acc, lane):  # type: ignore[no-untyped-def]
    acc = acc + lane * P2
    return _rotl(acc, 31) * P1


@numba.njit(inline="always")
def _merge(acc, v):  # type: ignore[no-untyped-def]
    acc ^= _round(np.uint64(0), v)
    return acc * P1 + P4


@numba.njit(cache=True, nogil=True)
def xxh64(buf: np.ndarray, length: int, seed: np.uint64) -> np.uint64:  # type: ignore[valid-type]
    """XXH64 of ``buf[:length]`` (uint8), as specified by the xxHash project."""
    p = 0
    if length >= 32:
        v1 = seed + P1 + P2
        v2 = seed + P2
        v3 = seed
        v4 = seed - P1
        while p + 32 <= length:
            v1 = _round(v1, _read64(buf, p))
            v2 = _round(v2, _read64(buf, p + 8))
            v3 = _round(v3, _read64(buf, p + 16))
            v4 = _round(v4, _read64(buf, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _merge(h, v1)
        h = _merge(h, v2)
        h = _merge(h, v3)
        h = _merge(h, v4)
    else:
        h = seed + P5
    h += np.uint64(length)
    while p + 8 <= length:
        h ^= _round(np.uint64(0), _read64(buf, p))
        h = _rotl(h, 27) * P1 + P4
        p += 8
    if p + 4 <= length:
        k = np.uint64(0)
        for i in range(4):
            k |= np.uint64(buf[p + i]) << np.uint64(8 * i)
        h ^= k * P1
        h = _rotl(h, 23) * P2 + P3
        p += 4
    while p < length:
        h ^= np.uint64(buf[p]) * P5
        h = _rotl(h, 11) * P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= P2
    h ^= h >> np.uint64(29)
    h *= P3
    h ^= h >> np.uint64(32)
    return h


@numba.njit(cache=True, nogil=True)
def _chain(offsets, items, item_bytes, per_block, extra, use_extra):  # type: ignore[no-untyped-def]
    n = offsets.size - 1
    counts = (offsets[1:] - offsets[:-1]) // per_block
    out_offsets = np.zeros(n + 1, np.int64)
    for r in range(n):
        out_offsets[r + 1] = out_offsets[r] + counts[r]
    hashes = np.empty(out_offsets[n], np.uint64)
    block_bytes = item_bytes * per_block
    scratch = np.empty(16 + block_bytes, np.uint8)
    k = 0
    for r in range(n):
        parent = ROOT
        for b in range(counts[r]):
            for i in range(8):
                scratch[i] = np.uint8((parent >> np.uint64(8 * i)) & np.uint64(0xFF))
            pos = 8
            if b == 0 and use_extra:
                for i in range(8):
                    scratch[pos + i] = np.uint8((extra[r] >> np.uint64(8 * i)) & np.uint64(0xFF))
                pos = 16
            start = (offsets[r] + b * per_block) * item_bytes
            scratch[pos : pos + block_bytes] = items[start : start + block_bytes]
            parent = xxh64(scratch, pos + block_bytes, np.uint64(0))
            hashes[k] = parent
            k += 1
    return out_offsets, hashes


def hash_token_blocks(
    offsets: np.ndarray, tokens: np.ndarray, block_size: int, salts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Chained hashes of the full blocks of each request.

    ``tokens`` holds every request's token ids back to back (request ``i`` is
    ``tokens[offsets[i]:offsets[i+1]]``, each id in ``[0, 2**32)``); ``salts`` (uint64, one per
    request) enter the first block only. Returns CSR ``(hash_offsets, hashes)``.
    """
    items = np.ascontiguousarray(tokens, dtype="<u4").view(np.uint8)
    return _chain(
        np.ascontiguousarray(offsets, dtype=np.int64),
        items,
        4,
        int(block_size),
        _extra(salts, len(offsets) - 1),
        salts is not None,
    )


def chain_block_ids(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Prefix-chain per-block content ids: ``h_i = xxh64(h_{i-1} ‖ id_i)``, so an id matches
    another only at the same position after the same prefix."""
    return chain_id_groups(offsets, ids, 1, None)[1]


def chain_id_groups(
    offsets: np.ndarray, ids: np.ndarray, per_block: int, salts: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Prefix-chain per-block content ids in groups of ``per_block`` (a block ``per_block``
    times the trace's): ``h_j = xxh64(h_{j-1} ‖ salt_j ‖ ids[j·g : (j+1)·g])``, each
    request's salt (``salts``, one per request; None: none) in its first block only. A
    trailing group of fewer ids is no full block and gets no hash. Returns CSR
    ``(hash_offsets, hashes)``."""
    items = np.ascontiguousarray(ids, dtype="<u8").view(np.uint8)
    return _chain(
        np.ascontiguousarray(offsets, dtype=np.int64),
        items,
        8,
        int(per_block),
        _extra(salts, len(offsets) - 1),
        salts is not None,
    )


def salt_of(name: str) -> np.uint64:
    """The 64-bit salt of a tenant name: xxh64 of its UTF-8 bytes."""
    data = np.frombuffer(name.encode("utf-8"), dtype=np.uint8)
    return xxh64(
        np.ascontiguousarray(data) if len(data) else np.zeros(1, np.uint8), len(data), np.uint64(0)
    )


def _extra(salts: np.ndarray | None, n: int) -> np.ndarray:
    if salts is None:
        return np.zeros(max(n, 1), np.uint64)
    salts = np.ascontiguousarray(salts, dtype=np.uint64)
    if len(salts) != n:
        raise ValueError(f"{len(salts)} salts for {n} requests")
    return salts

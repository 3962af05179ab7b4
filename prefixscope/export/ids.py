"""Block ids of an export: the warehouse's 64-bit block hashes never leave it; each export
numbers the blocks it holds densely, ``0 .. n-1``.

- Without a salt: in order of first appearance in the export. The numbering is then a function
  of the file's own lines (which request shares which prefix, in what order), so it says
  nothing the lines do not; two exports of the same requests are numbered the same.
- With a salt: by the rank of BLAKE2b keyed by the salt over each block hash. The numbering is
  a permutation that only the salt reproduces, and follows no order of the data (not even
  arrival): two exports under different salts are numbered independently, so an id in one says
  nothing of any id in the other. Two exports under the same salt rank the blocks they share in
  the same relative order, so a salt links the exports made with it: give each recipient its
  own.

Neither hides what the file exists to show: lengths, times, and which requests share which
prefix (docs/export.md#privacy).
"""

from __future__ import annotations

import hashlib

import numpy as np


def dense_ids(hashes: np.ndarray, salt: str | None = None) -> np.ndarray:
    """The id (int64, ``0 .. distinct-1``) of each of ``hashes`` (uint64, in export order)."""
    if len(hashes) == 0:
        return np.zeros(0, np.int64)
    distinct, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    if salt is None:
        order = np.argsort(first, kind="stable")  # distinct values by first appearance
    else:
        order = np.argsort(_keyed(distinct, salt), kind="stable")
    rank = np.empty(len(distinct), np.int64)
    rank[order] = np.arange(len(distinct), dtype=np.int64)
    return rank[inverse.ravel()]


def _keyed(values: np.ndarray, salt: str) -> np.ndarray:
    """BLAKE2b-128 keyed by ``salt`` of each value's 8 little-endian bytes, as sortable
    bytes (a collision among 2**128 would only tie two ranks, which ``argsort`` breaks by
    value)."""
    key = hashlib.blake2b(salt.encode("utf-8"), digest_size=32).digest()  # any length of salt
    raw = values.astype("<u8").tobytes()
    digests = [
        hashlib.blake2b(raw[i : i + 8], digest_size=16, key=key).digest()
        for i in range(0, len(raw), 8)
    ]
    return np.array(digests, dtype="S16")

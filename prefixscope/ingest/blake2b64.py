"""BLAKE2b with a key and an 8-byte digest, of one 64-bit word: RFC 7693 as ``hashlib.blake2b(
word.to_bytes(8, "little"), key=key, digest_size=8)`` computes it, for millions of words.

The key block is the same for every word, so its compression is done once per key
(:func:`state_after_key`); each word then costs one compression of a block whose first word is
the word and whose 15 others are zero. That compression is written out round by round from
RFC 7693's SIGMA (the table below, in ``# round r`` order), each G given the word where its
message index is 0 and zero elsewhere (``m`` and ``Z``), so the compiler folds the zeros away
and keeps the state in registers (``benchmarks/keyed_ingest.py`` times it; the history in
``benchmarks/RESULTS.md``). ``tests/test_hash_keys.py`` checks every word against ``hashlib``.

``_g`` and ``_rotr`` are plain compiled functions of scalars, which LLVM inlines: numba's own
inlining (``inline="always"``) copied their IR into all 96 calls, 10.1–11.5 s of compile for
each signature of :func:`keyed_words` against 2.8 s. The key's state and the IV are read into
locals before the loop: read from the arrays in it, LLVM's vectorized loop ran at 114–134 ns a
word whenever the last output had been freed before the call (31.9–32.5 ns otherwise); from locals,
29.6–30.5 ns either way (5 M words, best of 5, one core; RESULTS.md, stop 72).
"""

from __future__ import annotations

import numba
import numpy as np

#: The digest size in bytes: 64 bits, the width of a stored block hash.
DIGEST = 8
IV = np.array(
    [
        0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
        0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179,
    ],
    dtype=np.uint64,
)  # fmt: skip
SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ],
    dtype=np.int64,
)
#: A word block's byte count: the key block's 128 and the word's 8.
_WORD_COUNT = 128 + 8


@numba.njit
def _rotr(x, n):  # type: ignore[no-untyped-def]
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@numba.njit
def _g(a, b, c, d, x, y):  # type: ignore[no-untyped-def]
    """RFC 7693's G on four state words and two message words."""
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@numba.njit(cache=True)
def _compress(h, m, t, last):  # type: ignore[no-untyped-def]
    """RFC 7693's F, as a loop: ``h`` (8 words) updated in place by the block ``m`` (16
    words), ``t`` bytes counted so far, ``last`` for the final block. Once per key."""
    v = np.empty(16, np.uint64)
    for i in range(8):
        v[i] = h[i]
        v[i + 8] = IV[i]
    v[12] ^= np.uint64(t)
    if last:
        v[14] = ~v[14]
    for r in range(12):
        s = SIGMA[r % 10]
        v[0], v[4], v[8], v[12] = _g(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]])
        v[1], v[5], v[9], v[13] = _g(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]])
        v[2], v[6], v[10], v[14] = _g(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]])
        v[3], v[7], v[11], v[15] = _g(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]])
        v[0], v[5], v[10], v[15] = _g(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]])
        v[1], v[6], v[11], v[12] = _g(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]])
        v[2], v[7], v[8], v[13] = _g(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]])
        v[3], v[4], v[9], v[14] = _g(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]])
    for i in range(8):
        h[i] ^= v[i] ^ v[i + 8]


def state_after_key(key: bytes) -> np.ndarray:
    """The state after the key block: the parameter word (key length, digest size), then the
    key zero-padded to 128 bytes, compressed as a first block that is not the last."""
    block = np.zeros(128, np.uint8)
    block[: len(key)] = np.frombuffer(key, np.uint8)
    h = IV.copy()
    h[0] ^= np.uint64(0x01010000 ^ (len(key) << 8) ^ DIGEST)
    _compress(h, block.view("<u8").astype(np.uint64), 128, False)
    return h


@numba.njit(cache=True, nogil=True)
def keyed_words(values, state):  # type: ignore[no-untyped-def]
    """Each uint64 of ``values`` (as 8 little-endian bytes) under the key whose
    :func:`state_after_key` is ``state``: the digest's 8 bytes as a little-endian uint64."""
    out = np.empty(values.size, np.uint64)
    Z = np.uint64(0)
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    s4, s5, s6, s7 = state[4], state[5], state[6], state[7]
    i0, i1, i2, i3 = IV[0], IV[1], IV[2], IV[3]
    i4, i5, i6, i7 = IV[4] ^ np.uint64(_WORD_COUNT), IV[5], ~IV[6], IV[7]  # the last block
    for k in range(values.size):
        m = values[k]
        v0, v1, v2, v3, v4, v5, v6, v7 = s0, s1, s2, s3, s4, s5, s6, s7
        v8, v9, v10, v11, v12, v13, v14, v15 = i0, i1, i2, i3, i4, i5, i6, i7
        # round 0: SIGMA[0]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 1: SIGMA[1]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 2: SIGMA[2]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, m)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 3: SIGMA[3]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, m)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 4: SIGMA[4]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, m)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 5: SIGMA[5]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 6: SIGMA[6]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 7: SIGMA[7]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, m)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 8: SIGMA[8]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 9: SIGMA[9]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, m)
        # round 10: SIGMA[0]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, Z, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)
        # round 11: SIGMA[1]
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, Z, Z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, Z, Z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, Z, Z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, Z, Z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, Z, Z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m, Z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, Z, Z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, Z, Z)

        out[k] = s0 ^ v0 ^ v8
    return out

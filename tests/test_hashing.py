"""Chained block hashing: the published xxHash64, chained as a prefix cache chains blocks."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.ingest.hashing import chain_block_ids, hash_token_blocks, salt_of, xxh64


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), seed=st.integers(0, 2**64 - 1))
def test_xxh64_is_the_published_algorithm(data: bytes, seed: int) -> None:
    buf = np.frombuffer(data + b"\0", dtype=np.uint8)
    assert int(xxh64(buf, len(data), np.uint64(seed))) == xxhash.xxh64_intdigest(data, seed=seed)


def reference_chain(tokens: list[int], block_size: int, salt: int | None = None) -> list[int]:
    """The documented rule, spelled out with the reference xxhash package."""
    parent, out = 0, []
    for b in range(len(tokens) // block_size):
        extra = salt.to_bytes(8, "little") if (salt is not None and b == 0) else b""
        block = np.asarray(tokens[b * block_size : (b + 1) * block_size], dtype="<u4").tobytes()
        parent = xxhash.xxh64_intdigest(parent.to_bytes(8, "little") + extra + block)
        out.append(parent)
    return out


@settings(max_examples=100, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 2**32 - 1), max_size=70), min_size=1, max_size=8),
    block_size=st.sampled_from([1, 4, 16, 32]),
    salted=st.booleans(),
)
def test_token_blocks_follow_the_documented_chain(prompts, block_size, salted) -> None:
    offsets = np.cumsum([0] + [len(p) for p in prompts])
    tokens = np.array([t for p in prompts for t in p], dtype=np.uint32)
    salts = np.arange(1, len(prompts) + 1, dtype=np.uint64) * 7919 if salted else None
    hash_offsets, hashes = hash_token_blocks(offsets, tokens, block_size, salts)
    for i, prompt in enumerate(prompts):
        got = hashes[hash_offsets[i] : hash_offsets[i + 1]].tolist()
        assert got == reference_chain(prompt, block_size, int(salts[i]) if salted else None)


@pytest.mark.parametrize(
    ("n_tokens", "block_size", "blocks"), [(100, 16, 6), (100, 32, 3), (15, 16, 0), (64, 16, 4)]
)
def test_only_full_blocks_are_hashed(n_tokens: int, block_size: int, blocks: int) -> None:
    offsets, hashes = hash_token_blocks(np.array([0, n_tokens]), np.arange(n_tokens), block_size)
    assert offsets.tolist() == [0, blocks] and len(hashes) == blocks


def test_shared_prefixes_share_hashes_and_salts_separate_them() -> None:
    system = list(range(1000, 1032))  # two blocks of 16
    a, b = system + list(range(50, 66)), system + list(range(70, 86))
    offsets = np.array([0, 48, 96])
    tokens = np.array(a + b, dtype=np.uint32)
    _, plain = hash_token_blocks(offsets, tokens, 16)
    assert plain[:2].tolist() == plain[3:5].tolist() and plain[2] != plain[5]
    same = np.array([salt_of("acme")] * 2, dtype=np.uint64)
    _, salted_same = hash_token_blocks(offsets, tokens, 16, same)
    assert salted_same[:2].tolist() == salted_same[3:5].tolist()
    assert set(salted_same.tolist()).isdisjoint(plain.tolist())
    other = np.array([salt_of("acme"), salt_of("globex")], dtype=np.uint64)
    _, salted_other = hash_token_blocks(offsets, tokens, 16, other)
    assert set(salted_other[:3].tolist()).isdisjoint(salted_other[3:].tolist())


def test_chained_ids_match_only_after_the_same_prefix() -> None:
    # Content ids 7 and 9 repeat, but after different parents or at other positions.
    requests = [[1, 7, 9], [1, 7, 9], [2, 7, 9], [7, 1, 9]]
    offsets = np.cumsum([0] + [len(r) for r in requests])
    h = chain_block_ids(offsets, np.array([i for r in requests for i in r], dtype=np.uint64))
    rows = [h[offsets[i] : offsets[i + 1]].tolist() for i in range(len(requests))]
    assert rows[0] == rows[1]
    assert rows[2][0] != rows[0][0] and rows[2][1] != rows[0][1] and rows[2][2] != rows[0][2]
    assert rows[3][0] != rows[0][1]  # id 7 first is not id 7 after id 1
    assert rows[0][0] == xxhash.xxh64_intdigest(
        (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
    )

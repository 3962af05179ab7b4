"""The paged KV cache and the decoder on it (CPU, a tiny Llama shape): a hit maps the cached
blocks by reference and copies no KV, and it changes the cost of a prefill, never its answer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from prefixscope.analysis.cost.models import CATALOG, ModelShape  # noqa: E402
from prefixscope.gpu_replay.kv_cache import BlockTable, PagedKVCache  # noqa: E402
from prefixscope.gpu_replay.model import LlamaDecoder, attend, prefill  # noqa: E402

TINY = CATALOG["tiny-llama"]
BS = 16


@pytest.fixture(scope="module")
def model() -> LlamaDecoder:
    return LlamaDecoder(TINY, seed=0)


def make_cache(model: LlamaDecoder, blocks: int = 64) -> PagedKVCache:
    return model.new_cache(blocks, BS)


def tokens(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(TINY.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


# (cached prefix, new tokens, chunk of the hit's prefill)
SHAPES = [
    (32, 16, None),  # block-aligned prefix
    (37, 11, None),  # prefix ends mid-block: the hit writes a copy of that one block
    (16, 1, None),  # one new token (a full hit still computes its last token)
    (40, 50, 16),  # chunked prefill of the new tokens
    (5, 3, None),  # a prefix shorter than a block
    (0, 48, None),  # nothing cached: the hit is the miss
]


@pytest.mark.parametrize(("cached", "new", "chunk"), SHAPES)
def test_prefix_then_new_gives_the_one_shot_logits(model, cached, new, chunk) -> None:
    cache = make_cache(model)
    seq = tokens(cached + new)
    one_shot = prefill(model, cache, BlockTable(), seq)
    prefix = BlockTable()
    if cached:
        prefill(model, cache, prefix, seq[:cached])
    hit = cache.fork(prefix)
    through_table = prefill(model, cache, hit, seq[cached:], chunk)
    torch.testing.assert_close(through_table, one_shot, rtol=1e-5, atol=1e-5)


def test_a_chunked_miss_gives_the_one_shot_logits(model) -> None:
    cache = make_cache(model)
    seq = tokens(100)
    torch.testing.assert_close(
        prefill(model, cache, BlockTable(), seq, chunk=24),
        prefill(model, cache, BlockTable(), seq),
        rtol=1e-5,
        atol=1e-5,
    )


def test_a_dense_reference_agrees_with_the_paged_attention() -> None:
    """attend() against the textbook: every query head on its KV head, lower-right causal."""
    gen = torch.Generator().manual_seed(3)
    t, cached, heads, kv, d = 5, 7, 4, 2, 8
    q = torch.randn(t, heads, d, generator=gen)
    k = torch.randn(cached + t, kv, d, generator=gen)
    v = torch.randn(cached + t, kv, d, generator=gen)
    keys = torch.arange(cached + t)
    mask = (keys[None, :] <= torch.arange(cached, cached + t)[:, None]).repeat(heads // kv, 1)
    ref = torch.empty(t, heads, d)
    for hd in range(heads):
        s = q[:, hd] @ k[:, hd // (heads // kv)].T / d**0.5
        s = s.masked_fill(keys[None, :] > torch.arange(cached, cached + t)[:, None], -torch.inf)
        ref[:, hd] = s.softmax(-1) @ v[:, hd // (heads // kv)]
    torch.testing.assert_close(attend(q, k, v, mask), ref.reshape(t, heads * d))


def test_a_hit_maps_the_cached_blocks_and_copies_no_kv(model) -> None:
    cache = make_cache(model)
    seq = tokens(64 + 10)
    prefix = BlockTable()
    prefill(model, cache, prefix, seq[:64])  # 4 full blocks
    pools = [(p.data_ptr(), p.shape) for p in (*cache.k, *cache.v)]
    before = [p.clone() for p in (*cache.k, *cache.v)]
    free = cache.num_free
    hit = cache.fork(prefix)
    # the hit's table starts with the very same blocks, each now held twice
    assert hit.blocks == prefix.blocks and hit.num_tokens == 64
    assert [cache.refcount[b] for b in prefix.blocks] == [2, 2, 2, 2]
    assert cache.num_free == free  # nothing allocated for the cached part
    prefill(model, cache, hit, seq[64:])
    assert hit.blocks[:4] == prefix.blocks  # still the same blocks after the prefill
    assert cache.num_free == free - 1  # one block for the 10 new tokens, none for the prefix
    assert [(p.data_ptr(), p.shape) for p in (*cache.k, *cache.v)] == pools  # same storage
    for old, new in zip(before, (*cache.k, *cache.v), strict=True):
        # the cached blocks' K and V are untouched (read in place, never rewritten)
        assert torch.equal(old[prefix.blocks], new[prefix.blocks])


def test_a_hit_ending_mid_block_copies_that_block_only_and_leaves_the_original(model) -> None:
    cache = make_cache(model)
    seq = tokens(40 + 8)
    prefix = BlockTable()
    prefill(model, cache, prefix, seq[:40])  # blocks of 16, 16, 8 tokens
    last = prefix.blocks[-1]
    original = [p[last].clone() for p in cache.k]
    hit = cache.fork(prefix)
    prefill(model, cache, hit, seq[40:])
    assert hit.blocks[:2] == prefix.blocks[:2]  # full blocks shared
    assert hit.blocks[2] != last  # the partial one copied before the write
    assert cache.refcount[last] == 1
    for layer, before in enumerate(original):
        assert torch.equal(cache.k[layer][last], before)


def test_reference_counts_free_a_block_when_its_last_table_goes() -> None:
    cache = PagedKVCache(1, 8, 4, 1, 2)
    a = BlockTable()
    cache.reserve(a, 10)  # 3 blocks
    b = cache.fork(a, 8)  # shares the 2 full blocks
    # a: [0 1 2]  b: [0 1]   refcounts 2 2 1
    assert cache.refcount[:3] == [2, 2, 1] and cache.num_free == 5
    cache.release(a)
    assert cache.refcount[:3] == [1, 1, 0] and cache.num_free == 6  # block 2 back
    cache.release(b)
    assert cache.refcount[:3] == [0, 0, 0] and cache.num_free == 8
    with pytest.raises(MemoryError):
        cache.reserve(BlockTable(), 4 * 9)


def test_a_grouped_query_shape_is_required() -> None:
    with pytest.raises(ValueError):
        LlamaDecoder(ModelShape("odd", 1, 64, 64, 3, 2, 16, 32))

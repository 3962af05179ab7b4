"""A Llama-architecture decoder with random weights that prefills through a paged KV cache.

RMSNorm, rotary position embeddings, grouped-query attention and a SwiGLU MLP, in the shapes
of a :class:`~prefixscope.analysis.models.ModelShape`. The weights are random (same shapes, so
the same work and the same bytes as the real model): what is measured is cost, never text.

A prefill computes ``t`` new tokens after the ``n`` positions a block table already holds:
each layer writes the new K and V into their slots of the pool, gathers the table's ``n + t``
positions and attends. A miss is ``n = 0``; a hit is a table forked from the cached prefix.
The forward takes every index it needs as tensors prepared beforehand (:class:`PrefillInputs`),
so it runs without host synchronisation and can be captured in a CUDA graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from prefixscope.analysis.cost.models import ModelShape
from prefixscope.gpu_replay.kv_cache import BlockTable, PagedKVCache


@dataclass(frozen=True)
class PrefillInputs:
    """Everything one forward needs, prepared before it runs.

    ``write_slots``: flat pool slots of the new tokens; ``read_slots``: flat slots of every
    position the table holds after them (cached, then new); ``mask``: for ``n > 0``, which keys
    each query may see, one row per (query head of a KV group, query): key ``j`` is visible to
    the query at position ``p`` iff ``j <= p`` (causal, aligned to the last key: the new tokens
    come after the cached ones). ``None`` for ``n = 0``, where the square causal mask applies.
    """

    tokens: torch.Tensor
    positions: torch.Tensor
    write_slots: torch.Tensor
    read_slots: torch.Tensor
    mask: torch.Tensor | None

    @property
    def new_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def cached_tokens(self) -> int:
        return int(self.read_slots.shape[0]) - self.new_tokens


def prepare(
    cache: PagedKVCache, table: BlockTable, tokens: torch.Tensor, group: int
) -> PrefillInputs:
    """Reserve the table's slots for ``tokens`` and build the forward's index tensors.
    ``group`` is query heads per KV head."""
    n, t = table.num_tokens, int(tokens.shape[0])
    write = cache.reserve(table, t)
    read = cache.slots(table, 0, n + t)
    device = write.device
    positions = torch.arange(n, n + t, device=device)
    mask = None
    if n:
        keys = torch.arange(n + t, device=device)
        mask = (keys[None, :] <= positions[:, None]).repeat(group, 1)
    return PrefillInputs(tokens.to(device), positions, write, read, mask)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, **kw: object) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, **kw))  # type: ignore[arg-type]
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, the half-split convention of Llama checkpoints. x: [t, heads, d]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None):  # type: ignore[no-untyped-def]
    """Grouped-query attention of q ``[t, H, d]`` over k, v ``[S, K, d]``; returns ``[t, H·d]``.

    ``mask is None``: a square causal prefill (``S = t``), SDPA's own causal path. Otherwise the
    ``g = H / K`` query heads of each KV group are folded into the query axis (``[K, g·t, d]``)
    so each KV head is read once, never copied ``g`` times, against the explicit mask.
    """
    t, heads, d = q.shape
    kv_heads = k.shape[1]
    g = heads // kv_heads
    kt, vt = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)  # [1, K, S, d]
    if mask is None:
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0), kt, vt, is_causal=True, enable_gqa=g > 1
        )  # [1, H, t, d]
        return out[0].transpose(0, 1).reshape(t, heads * d)
    qf = q.view(t, kv_heads, g, d).permute(1, 2, 0, 3).reshape(1, kv_heads, g * t, d)
    out = F.scaled_dot_product_attention(qf, kt, vt, attn_mask=mask)  # [1, K, g·t, d]
    return out.view(kv_heads, g, t, d).permute(2, 0, 1, 3).reshape(t, heads * d)


class DecoderLayer(nn.Module):
    def __init__(self, s: ModelShape, eps: float, **kw: object) -> None:
        super().__init__()
        h, d = s.hidden_size, s.head_dim
        self.heads, self.kv_heads, self.head_dim = s.num_attention_heads, s.num_key_value_heads, d
        self.attn_norm = RMSNorm(h, eps, **kw)
        self.q = nn.Linear(h, self.heads * d, bias=False, **kw)  # type: ignore[arg-type]
        self.k = nn.Linear(h, self.kv_heads * d, bias=False, **kw)  # type: ignore[arg-type]
        self.v = nn.Linear(h, self.kv_heads * d, bias=False, **kw)  # type: ignore[arg-type]
        self.o = nn.Linear(self.heads * d, h, bias=False, **kw)  # type: ignore[arg-type]
        self.mlp_norm = RMSNorm(h, eps, **kw)
        self.gate = nn.Linear(h, s.intermediate_size, bias=False, **kw)  # type: ignore[arg-type]
        self.up = nn.Linear(h, s.intermediate_size, bias=False, **kw)  # type: ignore[arg-type]
        self.down = nn.Linear(s.intermediate_size, h, bias=False, **kw)  # type: ignore[arg-type]

    def forward(  # type: ignore[no-untyped-def]
        self, x, inp: PrefillInputs, cos, sin, k_pool: torch.Tensor, v_pool: torch.Tensor
    ):
        t = x.shape[0]
        r = self.attn_norm(x)
        q = rotate(self.q(r).view(t, self.heads, self.head_dim), cos, sin)
        k = rotate(self.k(r).view(t, self.kv_heads, self.head_dim), cos, sin)
        v = self.v(r).view(t, self.kv_heads, self.head_dim)
        k_pool.index_copy_(0, inp.write_slots, k)
        v_pool.index_copy_(0, inp.write_slots, v)
        keys, values = (
            k_pool.index_select(0, inp.read_slots),
            v_pool.index_select(0, inp.read_slots),
        )
        x = x + self.o(attend(q, keys, values, inp.mask))
        r = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(r)) * self.up(r))


class LlamaDecoder(nn.Module):
    def __init__(
        self,
        shape: ModelShape,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        rope_theta: float = 500_000.0,
        rms_eps: float = 1e-5,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if shape.mla or shape.num_attention_heads % shape.num_key_value_heads:
            raise ValueError(f"{shape.name}: not a grouped-query attention shape")
        self.shape = shape
        kw = {"device": device, "dtype": dtype}
        self.embed = nn.Embedding(shape.vocab_size, shape.hidden_size, **kw)  # type: ignore[arg-type]
        self.layers = nn.ModuleList(
            DecoderLayer(shape, rms_eps, **kw) for _ in range(shape.num_hidden_layers)
        )
        self.norm = RMSNorm(shape.hidden_size, rms_eps, **kw)
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False, **kw)  # type: ignore[arg-type]
        half = shape.head_dim // 2
        inv_freq = rope_theta ** (-torch.arange(half, dtype=torch.float32, device=device) / half)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._randomize(seed)
        self.requires_grad_(False)

    @property
    def group(self) -> int:
        return self.shape.num_attention_heads // self.shape.num_key_value_heads

    def new_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        p = next(self.parameters())
        s = self.shape
        return PagedKVCache(
            s.num_hidden_layers,
            num_blocks,
            block_size,
            s.num_key_value_heads,
            s.head_dim,
            dtype=p.dtype,
            device=p.device,
        )

    @torch.no_grad()
    def forward(self, inp: PrefillInputs, cache: PagedKVCache) -> torch.Tensor:
        """The last new token's logits, ``[vocab]``; the new K and V are left in the cache."""
        x = self.embed(inp.tokens)
        angles = inp.positions.float()[:, None] * self.inv_freq[None, :]
        cos = torch.cat((angles.cos(), angles.cos()), -1)[:, None, :].to(x.dtype)
        sin = torch.cat((angles.sin(), angles.sin()), -1)[:, None, :].to(x.dtype)
        for i, layer in enumerate(self.layers):
            k_pool, v_pool = cache.flat(i)
            x = layer(x, inp, cos, sin, k_pool, v_pool)
        return self.lm_head(self.norm(x[-1:]))[0]

    @torch.no_grad()
    def _randomize(self, seed: int) -> None:
        """Weights of unit-variance outputs (std 1/√fan-in), so activations stay finite in
        bf16 through any depth; norms at 1 as in a fresh checkpoint."""
        gen = torch.Generator(device=self.embed.weight.device).manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            std = 1.0 if name == "embed.weight" else 1 / math.sqrt(p.shape[1])
            if name.startswith("layers.") and name.endswith(("o.weight", "down.weight")):
                std /= math.sqrt(2 * self.shape.num_hidden_layers)  # residual growth ~ depth
            p.normal_(0.0, std, generator=gen)


def prefill(
    model: LlamaDecoder,
    cache: PagedKVCache,
    table: BlockTable,
    tokens: torch.Tensor,
    chunk: int | None = None,
) -> torch.Tensor:
    """Compute ``tokens`` after the table's positions, in chunks of at most ``chunk`` tokens
    (each chunk after the first is a prefill against the cached ones before it); returns the
    last token's logits."""
    return run_all(model, cache, plan(model, cache, table, tokens, chunk))


def plan(
    model: LlamaDecoder,
    cache: PagedKVCache,
    table: BlockTable,
    tokens: torch.Tensor,
    chunk: int | None = None,
) -> list[PrefillInputs]:
    """Reserve slots and prepare the inputs of every chunk, without running anything."""
    step = chunk or int(tokens.shape[0])
    return [
        prepare(cache, table, tokens[i : i + step], model.group)
        for i in range(0, int(tokens.shape[0]), step)
    ]


def run_all(model: LlamaDecoder, cache: PagedKVCache, parts: list[PrefillInputs]) -> torch.Tensor:
    logits = torch.empty(0)
    for part in parts:
        logits = model(part, cache)
    return logits

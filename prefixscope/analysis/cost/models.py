"""Model shapes, and what a token of KV cache costs in bytes: capacity in the units people buy.

KV bytes per token (one layer's K and V for every layer, per token):
- grouped-query / multi-head attention: ``2 × layers × kv_heads × head_dim × dtype bytes``;
- multi-head latent attention (DeepSeek-V2/V3): one latent of ``kv_lora_rank +
  qk_rope_head_dim`` per layer, ``layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes``.

A shape also says how the model is served: its mixture of experts (routed experts, how many
a token takes, their width, shared experts, leading dense layers), its sliding-window layers,
and the dtypes its weights are published in. Parameter counts are ``params.py``.

Shapes are copied from the models' published ``config.json``; ``--model-config`` reads any
Hugging Face config the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from prefixscope.analysis.cost.hfconfig import read_config

GIB = 2**30
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
#: Bytes per weight. int4 is the bare 4 bits (a group-quantised checkpoint adds its scales:
#: 1/64 of a byte per weight more at group 128 with bf16 scales); mxfp4 is OCP's microscaling
#: format as gpt-oss ships its experts: 4-bit values plus one 8-bit scale per 32, 4.25 bits.
WEIGHT_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "int4": 0.5, "mxfp4": 4.25 / 8}


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    kv_lora_rank: int | None = None  # set for multi-head latent attention
    qk_rope_head_dim: int | None = None
    # multi-head latent attention's other widths (DeepSeek-V2/V3): for parameter counts only
    q_lora_rank: int | None = None  # None: q is one full-rank projection
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # mixture of experts: 0 routed experts is a dense model
    experts: int = 0  # routed experts per MoE layer
    experts_per_token: int = 0  # routed experts each token takes (top-k)
    moe_intermediate_size: int = 0  # width of one expert's SwiGLU
    shared_experts: int = 0  # experts every token takes, of the same width
    dense_layers: int = 0  # leading layers with a dense MLP of intermediate_size
    # sliding-window attention (gpt-oss, Gemma 3): which layers does not change a count
    sliding_window: int | None = None  # tokens a sliding layer's query sees, itself included
    sliding_layers: int = 0  # how many of the layers attend through the window
    tie_word_embeddings: bool = False
    weight_dtype: str = "bf16"  # as published
    expert_dtype: str | None = None  # the routed experts', where it differs (gpt-oss: mxfp4)
    # q and k RMS-normalised in every layer before attention (Qwen3, MiniMax-M2): kernels the
    # measured tables do not time, priced by the fitted fixed cost (``cost/measured.py``)
    qk_norm: bool = False

    def __post_init__(self) -> None:
        # what a shape must satisfy for the counts and the KV sizes to mean anything
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            raise ValueError(f"{self.name}: experts per token must be from 1 to {self.experts}")
        if not 0 <= self.dense_layers <= self.num_hidden_layers:
            raise ValueError(f"{self.name}: dense layers must be from 0 to the layers")
        if not 0 <= self.sliding_layers <= self.num_hidden_layers:
            raise ValueError(f"{self.name}: sliding layers must be from 0 to the layers")
        if self.sliding_layers and not self.sliding_window:
            raise ValueError(f"{self.name}: sliding layers need a sliding window")
        for dtype in (self.weight_dtype, self.expert_dtype or self.weight_dtype):
            if dtype not in WEIGHT_BYTES:
                raise ValueError(
                    f"{self.name}: unknown weight dtype {dtype!r}; known: {', '.join(WEIGHT_BYTES)}"
                )

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is the experts: all but the leading dense ones."""
        return self.num_hidden_layers - self.dense_layers if self.moe else 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        """Every layer's K and V of one token (a sliding layer's too: a token in its window)."""
        return self.num_hidden_layers * self.kv_bytes_per_token_layer(kv_dtype)

    def kv_bytes_per_token_layer(self, kv_dtype: str = "bf16", kv_heads: int | None = None) -> int:
        """One layer's K and V of one token, for ``kv_heads`` heads (default: all of them; a
        latent, for multi-head latent attention, whatever ``kv_heads``)."""
        if kv_dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown KV dtype {kv_dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        width = DTYPE_BYTES[kv_dtype]
        if self.mla:
            return (int(self.kv_lora_rank or 0) + int(self.qk_rope_head_dim or 0)) * width
        heads = self.num_key_value_heads if kv_heads is None else kv_heads
        return 2 * heads * self.head_dim * width

    def window_blocks(self, block_size: int) -> int:
        """Blocks a sliding layer needs cached, ending where a hit ends, for the hit to count:
        ``ceil((window − 1) / block_size)`` (the query itself is in its window), as vLLM's
        hybrid KV cache manager asks (``SlidingWindowManager`` in
        ``vllm/v1/core/single_type_kv_cache_manager.py``); blocks before them may be gone."""
        if not self.sliding_window:
            return 0
        return -(-(self.sliding_window - 1) // block_size)

    def prefix_kv_bytes(self, tokens: int, block_size: int, kv_dtype: str = "bf16") -> int:
        """KV a cached prefix of ``tokens`` tokens keeps, in whole blocks: every block on a
        full-attention layer, only the last ``window_blocks`` on a sliding one (vLLM frees
        the blocks a window has left behind)."""
        blocks = -(-tokens // block_size)
        full = self.num_hidden_layers - self.sliding_layers
        sliding = min(blocks, self.window_blocks(block_size)) if self.sliding_layers else 0
        per_block = block_size * self.kv_bytes_per_token_layer(kv_dtype)
        return (full * blocks + self.sliding_layers * sliding) * per_block

    def blocks_in(self, gib: float, block_size: int, kv_dtype: str = "bf16") -> int:
        """Whole blocks of ``block_size`` tokens that ``gib`` GiB of KV cache hold."""
        return int(gib * GIB // (self.kv_bytes_per_token(kv_dtype) * block_size))

    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> ModelShape:
        """A shape from a Hugging Face ``config.json``, every key checked (``hfconfig``; its
        defaults where a key is absent)."""
        c = read_config(path)
        hidden, heads = c["hidden_size"], c["num_attention_heads"]
        mla = c.get("kv_lora_rank")
        return cls(
            name=name or c["name"] or Path(path).stem,
            num_hidden_layers=c["num_hidden_layers"],
            hidden_size=hidden,
            intermediate_size=c.get("intermediate_size", 4 * hidden),
            num_attention_heads=heads,
            num_key_value_heads=c["num_key_value_heads"],
            head_dim=c.get("head_dim") or hidden // heads,
            vocab_size=c.get("vocab_size", 0),
            kv_lora_rank=mla,
            qk_rope_head_dim=c.get("qk_rope_head_dim") if mla else None,
            q_lora_rank=c.get("q_lora_rank") if mla else None,
            qk_nope_head_dim=c.get("qk_nope_head_dim") if mla else None,
            v_head_dim=c.get("v_head_dim") if mla else None,
            experts=c.get("experts", 0),
            experts_per_token=c.get("experts_per_token", 0),
            moe_intermediate_size=c.get("moe_intermediate_size", 0),
            shared_experts=c.get("shared_experts", 0),
            dense_layers=c.get("dense_layers", 0),
            sliding_window=c.get("sliding_window"),
            sliding_layers=c.get("sliding_layers", 0),
            tie_word_embeddings=c.get("tie_word_embeddings", False),
            qk_norm=c.get("qk_norm", False),
        )


CATALOG: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("llama-3-8b", 32, 4096, 14336, 32, 8, 128, 128256),
        ModelShape("llama-3.1-70b", 80, 8192, 28672, 64, 8, 128, 128256),
        ModelShape("llama-2-70b", 80, 8192, 28672, 64, 8, 128, 32000),
        ModelShape("qwen2.5-7b", 28, 3584, 18944, 28, 4, 128, 152064),
        ModelShape("qwen2.5-72b", 80, 8192, 29568, 64, 8, 128, 152064),
        ModelShape("mistral-7b", 32, 4096, 14336, 32, 8, 128, 32000),
        # Llama-3.1-8B and Llama-3.3-70B: the shapes of Llama-3-8B and Llama-3.1-70B (their
        # config.json differ only in RoPE scaling and context length).
        ModelShape("llama-3.1-8b", 32, 4096, 14336, 32, 8, 128, 128256),
        ModelShape("llama-3.3-70b", 80, 8192, 28672, 64, 8, 128, 128256),
        # deepseek-ai/DeepSeek-V3 config.json: 671 B total, 37 B active (its model card);
        # 256 routed experts of width 2,048, 8 per token, 1 shared, the first 3 layers dense;
        # multi-head latent attention; weights published in fp8.
        ModelShape(
            "deepseek-v3",
            61,
            7168,
            18432,
            128,
            128,
            128,
            129280,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            q_lora_rank=1536,
            qk_nope_head_dim=128,
            v_head_dim=128,
            experts=256,
            experts_per_token=8,
            moe_intermediate_size=2048,
            shared_experts=1,
            dense_layers=3,
            weight_dtype="fp8",
        ),
        # Qwen/Qwen3-235B-A22B config.json: 235 B total, 22 B active (its model card); 128
        # experts of width 1,536, 8 per token, no shared expert, every layer sparse.
        ModelShape(
            "qwen3-235b-a22b",
            94,
            4096,
            12288,
            64,
            4,
            128,
            151936,
            experts=128,
            experts_per_token=8,
            moe_intermediate_size=1536,
            qk_norm=True,
        ),
        # openai/gpt-oss-120b config.json: 117 B total (116.83 B), 5.1 B active (5.13 B) per
        # its model card; 128 experts of width 2,880, 4 per token; every other layer of the 36
        # attends through a 128-token window; experts in mxfp4, the rest in bf16.
        ModelShape(
            "gpt-oss-120b",
            36,
            2880,
            2880,
            64,
            8,
            64,
            201088,
            experts=128,
            experts_per_token=4,
            moe_intermediate_size=2880,
            sliding_window=128,
            sliding_layers=18,
            expert_dtype="mxfp4",
        ),
        # Qwen/Qwen3-32B config.json: dense, 64 layers, grouped-query attention (8 KV heads).
        ModelShape("qwen3-32b", 64, 5120, 25600, 64, 8, 128, 151936, qk_norm=True),
        # MiniMaxAI/MiniMax-M2 config.json (M2.5 keeps its shape): 256 experts of width 1,536,
        # 8 per token, no shared expert, every layer sparse; weights published in fp8.
        ModelShape(
            "minimax-m2.5",
            62,
            3072,
            1536,
            48,
            8,
            128,
            200064,
            experts=256,
            experts_per_token=8,
            moe_intermediate_size=1536,
            qk_norm=True,
            weight_dtype="fp8",
        ),
        # moonshotai/Kimi-K2-Instruct config.json (Kimi-K2.5's language model has its shape):
        # DeepSeek-V3's architecture with 64 heads, 384 routed experts of width 2,048, 8 per
        # token, 1 shared, the first layer dense; weights published in fp8.
        ModelShape(
            "kimi-k2",
            61,
            7168,
            18432,
            64,
            64,
            128,
            163840,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            q_lora_rank=1536,
            qk_nope_head_dim=128,
            v_head_dim=128,
            experts=384,
            experts_per_token=8,
            moe_intermediate_size=2048,
            shared_experts=1,
            dense_layers=1,
            weight_dtype="fp8",
        ),
        # Not a published model: a small Llama shape whose prefills take milliseconds on a
        # CPU core, the default of `prefixscope replay --device cpu`.
        ModelShape("tiny-llama", 2, 256, 512, 4, 2, 64, 512),
    )
}


def resolve_model(name: str | None = None, config: str | Path | None = None) -> ModelShape:
    """A catalog model by name (case-insensitive), or the shape of a config.json."""
    if config is not None:
        return _own_name(ModelShape.from_hf_config(config, name))
    if name is None:
        raise ValueError("give --model NAME or --model-config config.json")
    key = name.lower()
    if key not in CATALOG:
        raise ValueError(
            f"unknown model {name!r}; known: {', '.join(CATALOG)} (or --model-config config.json)"
        )
    return CATALOG[key]


def _own_name(shape: ModelShape) -> ModelShape:
    """A config's shape under a catalog model's name but of another shape is named apart
    (``llama-3-8b+1a2b3c4d``, a digest of its shape): whatever is keyed by a model's name (a
    calibrated cost model, a table's rows) must never take one for the other."""
    known = CATALOG.get(shape.name.lower())
    if known is None or replace(shape, name=known.name) == known:
        return shape
    digest = hashlib.sha256(repr(replace(shape, name="")).encode()).hexdigest()[:8]
    return replace(shape, name=f"{shape.name}+{digest}")

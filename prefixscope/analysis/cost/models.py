"""Model shapes, and what a token of KV cache costs in bytes: capacity in the units people buy.

KV bytes per token (one layer's K and V for every layer, per token):
- grouped-query / multi-head attention: ``2 × layers × kv_heads × head_dim × dtype bytes``;
- multi-head latent attention (DeepSeek-V2/V3): one latent of ``kv_lora_rank +
  qk_rope_head_dim`` per layer, ``layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes``.

Shapes are copied from the models' published ``config.json``; ``--model-config`` reads any
Hugging Face config the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefixscope.analysis.cost.hfconfig import read_config

GIB = 2**30
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


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

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def kv_bytes_per_token(self, kv_dtype: str = "bf16") -> int:
        if kv_dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown KV dtype {kv_dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        width = DTYPE_BYTES[kv_dtype]
        if self.mla:
            latent = int(self.kv_lora_rank or 0) + int(self.qk_rope_head_dim or 0)
            return self.num_hidden_layers * latent * width
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * width

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
        ),
        # Not a published model: a small Llama shape whose prefills take milliseconds on a
        # CPU core, the default of `prefixscope replay --device cpu`.
        ModelShape("tiny-llama", 2, 256, 512, 4, 2, 64, 512),
    )
}


def resolve_model(name: str | None = None, config: str | Path | None = None) -> ModelShape:
    """A catalog model by name (case-insensitive), or the shape of a config.json."""
    if config is not None:
        return ModelShape.from_hf_config(config, name)
    if name is None:
        raise ValueError("give --model NAME or --model-config config.json")
    key = name.lower()
    if key not in CATALOG:
        raise ValueError(
            f"unknown model {name!r}; known: {', '.join(CATALOG)} (or --model-config config.json)"
        )
    return CATALOG[key]

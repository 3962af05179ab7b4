"""The analytic cost of a prefill: FLOPs, bytes and roofline time of a miss and of a hit.

A prefill computes ``new`` tokens against ``cached`` positions already in the KV cache. A miss
is ``new = input tokens, cached = 0``; a hit on ``h`` tokens is ``new = input - h, cached = h``.
The formulas, per decoder layer of a Llama-architecture model (grouped-query attention, SwiGLU
MLP, no biases; ``h`` hidden size, ``H`` query heads, ``K`` KV heads, ``d`` head dim, ``I`` MLP
width):

- parameters in matrix products: ``h·d·(2H + 2K)`` (q, k, v, o) ``+ 3·h·I`` (gate, up, down);
- linear FLOPs: ``2 × those parameters × new`` (one multiply-add per weight per token row);
- attention FLOPs: ``4·H·d × pairs``, both products (QKᵀ and PV, ``2·d`` each per query-key
  pair and head), where ``pairs = new·cached + new·(new+1)/2`` counts the (query, key) pairs the
  causal mask keeps: query ``i`` of the new tokens sees the cached positions and the new tokens
  up to itself. Softmax, norms, RoPE and activations are left out (``O(new·H)``, not products);
- bytes: every weight read once per forward (``parameters × dtype bytes``, the tiles of a
  product stream the weights once whatever ``new``), the cached K and V read once
  (``2·K·d × cached``), the new K and V written (``2·K·d × new``), the new queries read and
  the attention output written (``2·H·d × new``); other activations are left out;
- roofline time of an operation: ``max(FLOPs / peak FLOP/s, bytes / bandwidth)``, taken per
  operation (a layer's linear part and its attention part are separate kernels, and a hit's
  linear part is memory-bound while its attention may not be), summed over layers, plus the
  LM head for the last token only (``2·vocab·h`` FLOPs: an engine computes only the logits it
  samples from). The embedding lookup moves ``new·h`` elements and is left out.

Every function takes scalars or numpy arrays of ``new`` and ``cached``. Multi-head latent
attention and mixture-of-experts shapes are not modelled (their cost is not these formulas).
Pure numpy: the GPU benchmark imports it on a machine with torch and numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import DTYPE_BYTES, ModelShape

ArrayLike = float | int | np.ndarray


def _check(shape: ModelShape) -> None:
    if shape.mla:
        raise ValueError(f"{shape.name}: multi-head latent attention is not modelled")
    if shape.moe:  # the dense MLP term would price every expert as one MLP of intermediate_size
        raise ValueError(
            f"{shape.name}: a mixture of experts is not modelled by the roofline yet — "
            "give a dense model (its parameter counts and memory: `prefixscope deployment`)"
        )


def attention_params_per_layer(shape: ModelShape) -> int:
    """q, k, v and o projections: ``h·d·(2H + 2K)``."""
    h, d = shape.hidden_size, shape.head_dim
    return h * d * (2 * shape.num_attention_heads + 2 * shape.num_key_value_heads)


def mlp_params_per_layer(shape: ModelShape) -> int:
    """SwiGLU gate, up and down: ``3·h·I``."""
    return 3 * shape.hidden_size * shape.intermediate_size


def linear_params_per_layer(shape: ModelShape) -> int:
    return attention_params_per_layer(shape) + mlp_params_per_layer(shape)


def parameter_count(shape: ModelShape) -> int:
    """All parameters: layers (products and two RMSNorm weights each), the final norm, the input
    embedding and an untied LM head (``2·vocab·h``)."""
    _check(shape)
    h = shape.hidden_size
    per_layer = linear_params_per_layer(shape) + 2 * h
    return shape.num_hidden_layers * per_layer + h + 2 * shape.vocab_size * h


def attention_pairs(new: ArrayLike, cached: ArrayLike) -> ArrayLike:
    """(query, key) pairs a causal prefill of ``new`` tokens after ``cached`` ones computes."""
    return new * cached + new * (new + 1) / 2


def linear_flops_per_layer(shape: ModelShape, new: ArrayLike) -> ArrayLike:
    return 2 * linear_params_per_layer(shape) * new


def attention_flops_per_layer(shape: ModelShape, new: ArrayLike, cached: ArrayLike) -> ArrayLike:
    return 4 * shape.num_attention_heads * shape.head_dim * attention_pairs(new, cached)


def weight_bytes_per_layer(shape: ModelShape, dtype: str = "bf16") -> int:
    return linear_params_per_layer(shape) * DTYPE_BYTES[dtype]


def kv_bytes_per_layer(
    shape: ModelShape, new: ArrayLike, cached: ArrayLike, dtype: str = "bf16"
) -> ArrayLike:
    """Cached K and V read, new K and V written: ``2·K·d·(cached + new)`` elements."""
    return 2 * shape.num_key_value_heads * shape.head_dim * (cached + new) * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class OpCost:
    """One operation's work: FLOPs, bytes moved and its roofline time on a GPU."""

    flops: ArrayLike
    bytes: ArrayLike
    compute_s: ArrayLike
    memory_s: ArrayLike

    @property
    def seconds(self) -> ArrayLike:
        return np.maximum(self.compute_s, self.memory_s)

    @property
    def intensity(self) -> ArrayLike:
        """FLOPs per byte."""
        return self.flops / self.bytes


def _op(flops: ArrayLike, nbytes: ArrayLike, gpu: GpuSpec) -> OpCost:
    return OpCost(flops, nbytes, flops / gpu.peak_flops, nbytes / gpu.mem_bandwidth)


@dataclass(frozen=True)
class PrefillCost:
    """A prefill of ``new`` tokens after ``cached`` ones: per layer and for the whole model."""

    new: ArrayLike
    cached: ArrayLike
    layers: int
    linear: OpCost  # one layer's projections and MLP
    attention: OpCost  # one layer's attention (both products)
    head: OpCost  # the LM head, last token only

    @property
    def flops(self) -> ArrayLike:
        return self.layers * (self.linear.flops + self.attention.flops) + self.head.flops

    @property
    def bytes(self) -> ArrayLike:
        return self.layers * (self.linear.bytes + self.attention.bytes) + self.head.bytes

    @property
    def attention_flops(self) -> ArrayLike:
        return self.layers * self.attention.flops

    @property
    def seconds(self) -> ArrayLike:
        """Roofline time: each operation at the slower of its compute and memory time."""
        return self.layers * (self.linear.seconds + self.attention.seconds) + self.head.seconds


def prefill_cost(
    shape: ModelShape, gpu: GpuSpec, new: ArrayLike, cached: ArrayLike = 0, dtype: str = "bf16"
) -> PrefillCost:
    """The roofline cost of computing ``new`` tokens after ``cached`` positions."""
    _check(shape)
    width = DTYPE_BYTES[dtype]
    q_and_out = 2 * shape.num_attention_heads * shape.head_dim * new * width
    head_params = shape.vocab_size * shape.hidden_size
    return PrefillCost(
        new=new,
        cached=cached,
        layers=shape.num_hidden_layers,
        linear=_op(linear_flops_per_layer(shape, new), weight_bytes_per_layer(shape, dtype), gpu),
        attention=_op(
            attention_flops_per_layer(shape, new, cached),
            kv_bytes_per_layer(shape, new, cached, dtype) + q_and_out,
            gpu,
        ),
        head=_op(2.0 * head_params, head_params * width, gpu),
    )


def miss_and_hit(
    shape: ModelShape, gpu: GpuSpec, input_tokens: ArrayLike, hit_tokens: ArrayLike
) -> tuple[PrefillCost, PrefillCost]:
    """A request as a miss (full prefill) and as a hit on ``hit_tokens`` cached tokens. A full
    hit still computes its last token (an engine needs that token's logits), as vLLM does."""
    new = np.maximum(np.asarray(input_tokens) - np.asarray(hit_tokens), 1)
    return (
        prefill_cost(shape, gpu, np.asarray(input_tokens), 0),
        prefill_cost(shape, gpu, new, np.asarray(input_tokens) - new),
    )

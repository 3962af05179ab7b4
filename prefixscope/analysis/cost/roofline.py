"""The analytic cost of a prefill: FLOPs, bytes and roofline time of a miss and of a hit.

A prefill computes ``new`` tokens after ``cached`` positions already in the KV cache. A miss
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

**Mixture of experts.** A MoE layer multiplies each token by its attention, the router, the
shared experts and its ``k`` routed experts (the active parameters, ``params.py``): FLOPs are
``2 × those × new``. It reads its attention, router and shared weights and every expert one of
its ``new`` tokens is routed to: ``E·(1 − (1 − k/E)^new)`` experts under uniform routing
(``params.experts_touched``: ``k`` for one token, all ``E`` for a long prefill), each
``3·h·I_e`` weights at the experts' dtype. The leading ``dense_layers`` are dense layers.

**Multi-head latent attention** (DeepSeek-V2/V3) is priced in its absorbed form (DeepSeek-V2,
arXiv:2405.04434, §2.1.3: ``W_UK`` folds into the query, ``W_UV`` into the output): each head
scores its query against the cached latent and RoPE key (``r_kv + d_rope`` wide) and sums the
latents (``r_kv``), so a pair costs ``2·H·(2·r_kv + d_rope)`` FLOPs and a position reads its
latent, ``(r_kv + d_rope)`` elements, and nothing else; the absorbed projections multiply each
query by ``kv_b_proj`` once, which the linear FLOPs count. The reasons and the bound against
the expanded form are in docs/miss_cost.md.

**Tensor parallelism.** Every figure is one GPU's of ``tp``: FLOPs and weights split over TP
(but the weights vLLM replicates: MLA's down-projections and norms, the router), query heads
``H / TP``, KV heads ``max(1, K / TP)`` (the latent whole on every GPU), and two ring
all-reduces per layer of the step's activations, ``2·(TP − 1)/TP × new·h·2 B / NVLink`` (over
PCIe on a part without NVLink), not overlapped with compute.

Weights are read at the shape's published dtypes (fp8 for DeepSeek-V3, mxfp4 experts for
gpt-oss) and the KV and activations in bf16, unless ``dtype`` sets them all; FLOPs run at the
GPU's bf16 peak whatever the weights' dtype. Sliding-window layers are priced as full ones (an
upper bound). Every function takes scalars or numpy arrays of ``new`` and ``cached``. Pure
numpy: the GPU benchmark imports it on a machine with torch and numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.cost import params
from prefixscope.analysis.cost.deployment import check_tp, kv_heads_per_gpu
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import DTYPE_BYTES, WEIGHT_BYTES, ModelShape

ArrayLike = float | int | np.ndarray


def attention_params_per_layer(shape: ModelShape) -> int:
    """q, k, v and o: ``h·d·(2H + 2K)``; the latent projections for MLA (``params.py``)."""
    return params.attention_params_per_layer(shape)


def mlp_params_per_layer(shape: ModelShape) -> int:
    """SwiGLU gate, up and down: ``3·h·I``."""
    return 3 * shape.hidden_size * shape.intermediate_size


def linear_params_per_layer(shape: ModelShape) -> int:
    """A dense layer's products: its attention projections and its MLP."""
    return attention_params_per_layer(shape) + mlp_params_per_layer(shape)


def parameter_count(shape: ModelShape) -> int:
    """All parameters: layers (products and two RMSNorm weights each), the final norm, the input
    embedding and an untied LM head (``2·vocab·h``); every expert of a MoE (``params.py``)."""
    return params.parameter_count(shape).total


def attention_pairs(new: ArrayLike, cached: ArrayLike) -> ArrayLike:
    """(query, key) pairs a causal prefill of ``new`` tokens after ``cached`` ones computes."""
    return new * cached + new * (new + 1) / 2


def linear_flops_per_layer(shape: ModelShape, new: ArrayLike) -> ArrayLike:
    return 2 * linear_params_per_layer(shape) * new


def attention_flops_per_layer(shape: ModelShape, new: ArrayLike, cached: ArrayLike) -> ArrayLike:
    return pair_flops(shape) * attention_pairs(new, cached)


def pair_flops(shape: ModelShape, tp: int = 1) -> int:
    """Attention FLOPs per (query, key) pair on one GPU of ``tp`` (``H / TP`` heads): GQA's
    ``4·H·d``; MLA's absorbed ``2·H·(2·r_kv + d_rope)``."""
    heads = shape.num_attention_heads // tp
    if shape.mla:
        return 2 * heads * (2 * int(shape.kv_lora_rank or 0) + int(shape.qk_rope_head_dim or 0))
    return 4 * heads * shape.head_dim


def allreduce_seconds_per_token(
    shape: ModelShape, gpu: GpuSpec, tp: int, dtype: str | None
) -> float:
    """Both ring all-reduces of one layer (after attention, after the MLP), per token of the
    step: ``2 × 2·(TP − 1)/TP × h × 2 B / link``; 0 at TP 1 (``link``: ``tp_link_gbps``)."""
    if tp == 1:
        return 0.0
    ring = 2 * (tp - 1) / tp * shape.hidden_size * DTYPE_BYTES[dtype or "bf16"]
    return 2 * ring / (tp_link_gbps(gpu) * 1e9)


def tp_link_gbps(gpu: GpuSpec) -> float:
    """GB/s one way between two GPUs of a tensor-parallel group: NVLink where the part has it,
    else its PCIe link to the host (a part without NVLink, the L40S, exchanges over PCIe);
    0 where neither is known."""
    return float(gpu.nvlink_gbps or gpu.host_link_gbps or 0)


@dataclass(frozen=True)
class GpuShare:
    """What one GPU of ``tp`` holds and does per layer: the figures ``prefill_cost`` and the
    fleet's step form (``fleet/stepcost.py``) are both written from. Parameters are counted as
    one GPU multiplies them: the replicated ones whole, the rest ``/ tp``."""

    weight_width: float  # bytes per weight, all but the routed experts
    expert_width: float  # bytes per routed-expert weight
    act_width: int  # bytes per KV or activation element
    dense_params: float  # a dense layer's products
    moe_active: float  # a MoE layer's products one token multiplies (0 for a dense model)
    moe_fixed: float  # a MoE layer's weights every step reads: attention, router, shared
    expert_params: float  # one routed expert's share
    pair_flops: int  # attention FLOPs per (query, key) pair
    kv_elements: int  # KV elements per position and layer: read when cached, written when new
    query_elements: int  # per new token and layer: its queries read, its attention output written
    head_params: float
    allreduce_s: float  # both all-reduces of one layer, per token of the step

    @classmethod
    def of(cls, shape: ModelShape, gpu: GpuSpec, tp: int = 1, dtype: str | None = None) -> GpuShare:
        """ValueError, in one line, for a TP vLLM would refuse or a GPU with no link."""
        _check(shape, gpu, tp)
        h = shape.hidden_size
        heads = shape.num_attention_heads // tp
        # vLLM builds MLA's q_a_proj and kv_a_proj_with_mqa (with their norms) and the MoE
        # router as ReplicatedLinear (vllm/model_executor/models/deepseek_v2.py): whole on
        # every GPU. Both are 0 for a dense GQA model, whose shares are then exactly ``P / tp``.
        down = 0
        if shape.mla:
            q_rank, kv_rank = shape.q_lora_rank or 0, int(shape.kv_lora_rank or 0)
            down = h * (q_rank + kv_rank + int(shape.qk_rope_head_dim or 0)) + q_rank + kv_rank
        router = shape.experts * h
        expert = params.expert_params(shape)
        fixed = attention_params_per_layer(shape) + router + shape.shared_experts * expert
        if shape.mla:
            kv = int(shape.kv_lora_rank or 0) + int(shape.qk_rope_head_dim or 0)
            query = heads * (kv + int(shape.kv_lora_rank or 0))  # latent query and output
        else:
            kv = 2 * kv_heads_per_gpu(shape, tp) * shape.head_dim
            query = 2 * heads * shape.head_dim
        whole = down + router
        routed = shape.experts_per_token * expert
        return cls(
            weight_width=WEIGHT_BYTES[dtype or shape.weight_dtype],
            expert_width=WEIGHT_BYTES[dtype or shape.expert_dtype or shape.weight_dtype],
            act_width=DTYPE_BYTES[dtype or "bf16"],
            dense_params=down + (linear_params_per_layer(shape) - down) / tp,
            moe_active=whole + (fixed - whole + routed) / tp if shape.moe else 0.0,
            moe_fixed=whole + (fixed - whole) / tp if shape.moe else 0.0,
            expert_params=expert / tp,
            pair_flops=pair_flops(shape, tp),
            kv_elements=kv,
            query_elements=query,
            head_params=shape.vocab_size * h / tp,
            allreduce_s=allreduce_seconds_per_token(shape, gpu, tp, dtype),
        )


def _check(shape: ModelShape, gpu: GpuSpec, tp: int) -> None:
    if tp < 1:
        raise ValueError(f"TP must be 1 or more, got {tp} — give --tp 1, 2, 4 or 8")
    if tp > 1:
        check_tp(shape, tp)
        if not tp_link_gbps(gpu):
            raise ValueError(
                f"GPU {gpu.name!r} has no NVLink or host link figure, which tensor "
                "parallelism's all-reduces need — give nvlink_gbps in its TOML file, or TP 1"
            )


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
    """A prefill of ``new`` tokens after ``cached`` ones on one GPU of ``tp``: per layer and
    for the whole model. A dense model has ``moe_layers = 0`` and ``moe`` None."""

    new: ArrayLike
    cached: ArrayLike
    layers: int
    linear: OpCost  # one dense layer's projections and MLP
    attention: OpCost  # one layer's attention (both products)
    head: OpCost  # the LM head, last token only
    moe_layers: int = 0
    moe: OpCost | None = None  # one MoE layer's projections, router and experts
    experts_touched: ArrayLike = 0.0  # routed experts one MoE layer reads
    kv_bytes_per_layer: ArrayLike = 0.0  # cached KV read and new KV written, of ``attention``
    allreduce_s: ArrayLike = 0.0  # one layer's all-reduces (0 at TP 1)
    tp: int = 1

    def _sum(self, of: str) -> ArrayLike:
        """``of`` summed over the layers and the head. A dense model's sum is written as it
        always was, ``layers × (linear + attention) + head``, so its figures stay bit for bit."""
        dense = self.layers - self.moe_layers
        total = dense * (getattr(self.linear, of) + getattr(self.attention, of))
        if self.moe is not None and self.moe_layers:
            total = total + self.moe_layers * (getattr(self.moe, of) + getattr(self.attention, of))
        return total + getattr(self.head, of)

    @property
    def flops(self) -> ArrayLike:
        return self._sum("flops")

    @property
    def bytes(self) -> ArrayLike:
        """HBM bytes one GPU moves (the all-reduces' NVLink traffic is not HBM's)."""
        return self._sum("bytes")

    @property
    def weight_bytes(self) -> ArrayLike:
        """Weights one GPU reads: every dense layer's, the touched experts, the LM head."""
        moe = self.moe_layers * self.moe.bytes if self.moe is not None else 0.0
        return (self.layers - self.moe_layers) * self.linear.bytes + moe + self.head.bytes

    @property
    def kv_bytes(self) -> ArrayLike:
        return self.layers * self.kv_bytes_per_layer

    @property
    def attention_flops(self) -> ArrayLike:
        return self.layers * self.attention.flops

    @property
    def seconds(self) -> ArrayLike:
        """Roofline time: each operation at the slower of its compute and memory time, and
        the all-reduces after them."""
        total = self._sum("seconds")
        return total + self.layers * self.allreduce_s if self.tp > 1 else total


def prefill_cost(
    shape: ModelShape,
    gpu: GpuSpec,
    new: ArrayLike,
    cached: ArrayLike = 0,
    dtype: str | None = None,
    tp: int = 1,
) -> PrefillCost:
    """The roofline cost of computing ``new`` tokens after ``cached`` positions, on one GPU of
    ``tp``. ``dtype`` None: weights at the shape's dtypes, KV and activations in bf16."""
    g = GpuShare.of(shape, gpu, tp, dtype)
    kv = g.kv_elements * (cached + new) * g.act_width
    q_and_out = g.query_elements * new * g.act_width
    moe, touched = None, 0.0
    if shape.moe:
        touched = params.experts_touched(new, shape.experts_per_token, shape.experts)
        read = g.moe_fixed * g.weight_width + touched * g.expert_params * g.expert_width
        moe = _op(2 * g.moe_active * new, read, gpu)
    return PrefillCost(
        new=new,
        cached=cached,
        layers=shape.num_hidden_layers,
        linear=_op(2 * g.dense_params * new, g.dense_params * g.weight_width, gpu),
        attention=_op(g.pair_flops * attention_pairs(new, cached), kv + q_and_out, gpu),
        head=_op(2.0 * g.head_params, g.head_params * g.weight_width, gpu),
        moe_layers=shape.moe_layers,
        moe=moe,
        experts_touched=touched,
        kv_bytes_per_layer=kv,
        allreduce_s=g.allreduce_s * new,
        tp=tp,
    )


def miss_and_hit(
    shape: ModelShape,
    gpu: GpuSpec,
    input_tokens: ArrayLike,
    hit_tokens: ArrayLike,
    tp: int = 1,
) -> tuple[PrefillCost, PrefillCost]:
    """A request as a miss (full prefill) and as a hit on ``hit_tokens`` cached tokens. A full
    hit still computes its last token (an engine needs that token's logits), as vLLM does."""
    new = np.maximum(np.asarray(input_tokens) - np.asarray(hit_tokens), 1)
    return (
        prefill_cost(shape, gpu, np.asarray(input_tokens), 0, tp=tp),
        prefill_cost(shape, gpu, new, np.asarray(input_tokens) - new, tp=tp),
    )

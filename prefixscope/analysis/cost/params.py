"""What a model's weights are: parameters in total and per token, the experts a step reads,
and the bytes the weights hold in HBM.

Per decoder layer (``h`` hidden size, ``H`` query heads, ``K`` KV heads, ``d`` head dim, ``V``
vocabulary; no biases, as Llama, Qwen3 and DeepSeek-V3 have none):

- attention, grouped-query: ``h·d·(2H + 2K)`` (q, k, v, o);
- attention, multi-head latent (DeepSeek-V3): q through a rank ``r_q`` down-projection,
  ``h·r_q + r_q·H·(d_nope + d_rope)`` (``h·H·(d_nope + d_rope)`` with none), the joint KV
  down-projection and the shared RoPE key ``h·(r_kv + d_rope)``, its up-projection to keys and
  values ``r_kv·H·(d_nope + d_v)``, the output ``H·d_v·h``, and the two low-rank norms;
- a dense MLP: ``3·h·I`` (SwiGLU gate, up, down);
- a mixture of experts: ``(E + S)·3·h·I_e`` for ``E`` routed and ``S`` shared experts of width
  ``I_e``, and the router ``E·h``; the first ``dense_layers`` layers have a dense MLP instead;
- two RMSNorm weights per layer, a final norm, the input embedding ``V·h`` and the LM head
  ``V·h`` (one matrix when tied).

**Active parameters** are those a token's forward multiplies by: every layer's attention, the
``k`` routed experts it is sent to and the shared ones, the routers, and the LM head; not the
input embedding (a row lookup, no product), as the gpt-oss model card counts them (5.13 B:
its MLP, attention and unembedding shares, the embedding left out).

**Experts a step reads.** The weights in HBM are all the experts; a step computes each token
with ``k`` of them and reads every expert at least one of its tokens is routed to. Under
uniform, independent routing of ``n`` tokens to ``k`` of ``E`` experts each, an expert is
missed by one token with probability ``1 − k/E`` and by all ``n`` with ``(1 − k/E)^n``, so the
expected experts read per MoE layer are ``E·(1 − (1 − k/E)^n)``: ``k`` for one token, nearly
``E`` for a long prefill (DeepSeek-V3, k = 8 of 256: 8 at n = 1, 30.5 at 4 tokens, 163 at 32,
all 256 to within 10⁻¹¹ at 1,024).
Real routers are not uniform (load-balancing losses push them toward it); a skewed router
touches fewer experts, so this is an upper estimate for a given ``n``.

Pure Python, for the same reason as ``gpus.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.cost.models import WEIGHT_BYTES, ModelShape


def attention_params_per_layer(shape: ModelShape) -> int:
    """q, k, v and o (grouped-query), or the latent projections and their norms (MLA)."""
    h, heads = shape.hidden_size, shape.num_attention_heads
    if not shape.mla:
        return h * shape.head_dim * (2 * heads + 2 * shape.num_key_value_heads)
    rope, kv_rank = int(shape.qk_rope_head_dim or 0), int(shape.kv_lora_rank or 0)
    nope = int(shape.qk_nope_head_dim or 0)
    v = int(shape.v_head_dim or shape.head_dim)
    q_rank = shape.q_lora_rank
    q = h * heads * (nope + rope) if not q_rank else h * q_rank + q_rank * heads * (nope + rope)
    norms = (q_rank or 0) + kv_rank
    return q + h * (kv_rank + rope) + kv_rank * heads * (nope + v) + heads * v * h + norms


def expert_params(shape: ModelShape) -> int:
    """One expert's SwiGLU: ``3·h·I_e``."""
    return 3 * shape.hidden_size * shape.moe_intermediate_size


def dense_mlp_params(shape: ModelShape) -> int:
    return 3 * shape.hidden_size * shape.intermediate_size


@dataclass(frozen=True)
class ParamCount:
    """A model's parameters, split as HBM and a step see them."""

    total: int  # everything the checkpoint holds (without MTP or draft layers)
    active: int  # per token: see the module docstring
    routed_experts: int  # the routed experts of every MoE layer (0 for a dense model)
    embedding: int  # the input embedding (and the LM head, when tied)

    @property
    def non_expert(self) -> int:
        return self.total - self.routed_experts


def parameter_count(shape: ModelShape) -> ParamCount:
    """Total and active parameters of ``shape`` (the formulas above)."""
    h, n = shape.hidden_size, shape.num_hidden_layers
    attention = n * (attention_params_per_layer(shape) + 2 * h)
    dense_layers = shape.dense_layers if shape.moe else n
    dense = dense_layers * dense_mlp_params(shape)
    routed = shape.moe_layers * shape.experts * expert_params(shape)
    shared = shape.moe_layers * shape.shared_experts * expert_params(shape)
    routers = shape.moe_layers * shape.experts * h
    embedding, head = shape.vocab_size * h, 0 if shape.tie_word_embeddings else shape.vocab_size * h
    total = attention + dense + routed + shared + routers + h + embedding + head
    active_routed = shape.moe_layers * shape.experts_per_token * expert_params(shape)
    # the LM head multiplies even when tied to the embedding: count its matrix once, as active
    active = attention + dense + active_routed + shared + routers + h + shape.vocab_size * h
    return ParamCount(total=total, active=active, routed_experts=routed, embedding=embedding)


def experts_touched(tokens: float, k: int, experts: int) -> float:
    """Expected experts of one MoE layer a step of ``tokens`` tokens reads, each token routed
    to ``k`` of ``experts`` uniformly and independently: ``E·(1 − (1 − k/E)^n)``."""
    if experts <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - k / experts) ** tokens)


def weight_bytes(shape: ModelShape, dtype: str | None = None) -> float:
    """Bytes of all the weights in HBM: the routed experts at ``expert_dtype`` (else the
    weights'), everything else at ``weight_dtype``; ``dtype`` overrides both."""
    if dtype is not None and dtype not in WEIGHT_BYTES:
        raise ValueError(f"unknown weight dtype {dtype!r}; known: {', '.join(WEIGHT_BYTES)}")
    rest = WEIGHT_BYTES[dtype or shape.weight_dtype]
    experts = WEIGHT_BYTES[dtype or shape.expert_dtype or shape.weight_dtype]
    count = parameter_count(shape)
    return count.non_expert * rest + count.routed_experts * experts

"""The roofline of a mixture of experts, of multi-head latent attention and of one GPU under
tensor parallelism: figures computed here by hand from DeepSeek-V3's config.json, and the
invariants (monotonic in new and cached tokens; a dense model at TP 1 as it always was)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.cost.gpus import GPUS
from prefixscope.analysis.cost.models import CATALOG
from prefixscope.analysis.cost.roofline import prefill_cost
from prefixscope.cli import main

DSV3 = CATALOG["deepseek-v3"]
H200 = GPUS["h200"]
# deepseek-ai/DeepSeek-V3 config.json: h 7,168; 128 heads; q_lora_rank 1,536; kv_lora_rank
# 512; qk_nope 128, qk_rope 64, v 128; 256 experts of 2,048, 8 per token, 1 shared.
H, HEADS, RQ, RKV, NOPE, ROPE, V, IE = 7168, 128, 1536, 512, 128, 64, 128, 2048
ATTENTION = (
    H * RQ + RQ * HEADS * (NOPE + ROPE)  # q down and up
    + H * (RKV + ROPE)  # joint KV down-projection and the RoPE key
    + RKV * HEADS * (NOPE + V)  # kv_b_proj
    + HEADS * V * H  # o
    + RQ + RKV  # the two low-rank norms
)  # fmt: skip
EXPERT = 3 * H * IE
ROUTER = 256 * H
REPLICATED = H * (RQ + RKV + ROPE) + RQ + RKV + ROUTER  # vLLM's ReplicatedLinear weights


def test_the_hand_counts() -> None:
    assert ATTENTION == 187_107_328 and EXPERT == 44_040_192
    assert ATTENTION + ROUTER + 9 * EXPERT == 585_304_064  # a MoE layer's active products


@pytest.mark.parametrize(
    ("tp", "pair", "active"),
    [
        # absorbed MLA: 2·H/TP·(2·512 + 64) FLOPs a pair; a MoE layer's products one token
        # multiplies on one GPU: the replicated whole, the rest / TP
        (1, 278_528, 585_304_064),
        (8, 34_816, REPLICATED + (585_304_064 - REPLICATED) / 8),
    ],
)
def test_deepseek_v3_hit_by_hand(tp: int, pair: int, active: float) -> None:
    new, cached = 512, 8192
    hit = prefill_cost(DSV3, H200, new, cached, tp=tp)
    pairs = new * cached + new * (new + 1) // 2
    assert hit.attention.flops == pair * pairs
    # the latent, whole on every GPU: (512 + 64) bf16 per position, read or written
    assert hit.kv_bytes_per_layer == (RKV + ROPE) * (cached + new) * 2
    assert hit.moe is not None
    assert hit.moe.flops == pytest.approx(2 * active * new, rel=1e-12)
    assert hit.experts_touched == pytest.approx(256 * (1 - (1 - 8 / 256) ** 512), rel=1e-12)
    # fp8 weights: the fixed part and the touched experts, one byte a weight
    fixed = REPLICATED + (ATTENTION + ROUTER + EXPERT - REPLICATED) / tp
    read = fixed + hit.experts_touched * EXPERT / tp
    assert hit.moe.bytes == pytest.approx(read, rel=1e-12)
    ring = 0 if tp == 1 else 2 * 2 * (tp - 1) / tp * new * H * 2 / 450e9
    assert hit.allreduce_s == pytest.approx(ring, rel=1e-12)


def test_one_decode_token_reads_its_k_experts_and_a_long_prefill_all() -> None:
    one = prefill_cost(DSV3, H200, 1, 8192)
    assert one.experts_touched == pytest.approx(8)
    assert one.moe is not None and one.moe.bytes == pytest.approx(585_304_064)  # = active, fp8
    long = prefill_cost(DSV3, H200, 4096, 0)
    assert long.experts_touched == pytest.approx(256)


def test_gpt_oss_experts_are_read_in_mxfp4() -> None:
    shape = CATALOG["gpt-oss-120b"]
    one = prefill_cost(shape, H200, 1, 0)
    expert = 3 * 2880 * 2880
    attention = 2880 * 64 * (2 * 64 + 2 * 8)
    fixed = (attention + 128 * 2880) * 2  # bf16
    assert one.moe is not None
    assert one.moe.bytes == pytest.approx(fixed + 4 * expert * 4.25 / 8, rel=1e-12)


MOE = ["deepseek-v3", "qwen3-235b-a22b", "gpt-oss-120b", "llama-3.1-70b"]


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MOE),
    tp=st.sampled_from([1, 2, 4, 8]),
    new=st.integers(1, 40_000),
    cached=st.integers(0, 200_000),
    more=st.integers(1, 5_000),
)
def test_monotonic_in_new_and_cached(model: str, tp: int, new: int, cached: int, more: int) -> None:
    shape = CATALOG[model]
    base = prefill_cost(shape, H200, new, cached, tp=tp).seconds
    assert prefill_cost(shape, H200, new + more, cached, tp=tp).seconds >= base
    assert prefill_cost(shape, H200, new, cached + more, tp=tp).seconds >= base


def _dense_as_before(model: str, gpu: str, new: float, cached: float) -> tuple[float, float]:
    """The dense roofline as it was written before MoE and TP, term for term."""
    s, g = CATALOG[model], GPUS[gpu]
    h, d, heads, kv = s.hidden_size, s.head_dim, s.num_attention_heads, s.num_key_value_heads
    params = h * d * (2 * heads + 2 * kv) + 3 * h * s.intermediate_size
    pairs = new * cached + new * (new + 1) / 2
    lin_f, lin_b = 2 * params * new, params * 2
    att_f = 4 * heads * d * pairs
    att_b = 2 * kv * d * (cached + new) * 2 + 2 * heads * d * new * 2
    head = s.vocab_size * h
    secs = s.num_hidden_layers * (
        max(lin_f / g.peak_flops, lin_b / g.mem_bandwidth)
        + max(att_f / g.peak_flops, att_b / g.mem_bandwidth)
    ) + max(2.0 * head / g.peak_flops, head * 2 / g.mem_bandwidth)
    return secs, s.num_hidden_layers * (lin_f + att_f) + 2.0 * head


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from([m for m, s in CATALOG.items() if not (s.moe or s.mla)]),
    gpu=st.sampled_from(list(GPUS)),
    new=st.integers(1, 40_000),
    cached=st.integers(0, 200_000),
)
def test_a_dense_model_at_tp_1_is_unchanged_bit_for_bit(
    model: str, gpu: str, new: int, cached: int
) -> None:
    cost = prefill_cost(CATALOG[model], GPUS[gpu], np.float64(new), np.float64(cached), tp=1)
    seconds, flops = _dense_as_before(model, gpu, np.float64(new), np.float64(cached))
    assert cost.seconds == seconds and cost.flops == flops


def test_tp_splits_a_dense_model_and_adds_the_all_reduces() -> None:
    shape = CATALOG["llama-3.1-70b"]
    one, eight = (prefill_cost(shape, H200, 8192, 0, tp=tp) for tp in (1, 8))
    assert eight.linear.flops == pytest.approx(one.linear.flops / 8, rel=1e-12)
    assert eight.attention.flops == pytest.approx(one.attention.flops / 8, rel=1e-12)
    # 8 KV heads over 8 GPUs: one each, an eighth of the KV bytes
    assert eight.kv_bytes == pytest.approx(one.kv_bytes / 8, rel=1e-12)
    assert eight.allreduce_s == pytest.approx(2 * 2 * 7 / 8 * 8192 * 8192 * 2 / 450e9)


def test_tp_without_nvlink_all_reduces_over_pcie() -> None:
    # the L40S has no NVLink: its pair exchanges over its PCIe 4.0 x16 link, 31.5 GB/s one way
    shape = CATALOG["llama-3-8b"]
    cost = prefill_cost(shape, GPUS["l40s"], 1024, 0, tp=2)
    assert cost.allreduce_s == pytest.approx(2 * 2 * 1 / 2 * 1024 * 4096 * 2 / 31.5e9)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--gpu", "h200", "--tp", "3"], "TP 3 does not divide"),
        (["--gpu", "mygpu:400:1.6", "--tp", "2"], "no NVLink or host link"),
        (["--deployment", "h200x8", "--tp", "4"], "disagree"),
        (["--deployment", "h200y8"], "unknown GPU"),
    ],
)
def test_cli_refusals_are_one_line(capsys, argv: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    status = main(["roofline", "--model", "deepseek-v3", "--cached", "8", "--new", "8", *argv])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert err.startswith("prefixscope roofline: error:") and " — " in err


def test_cli_prints_the_experts_and_weights_read(capsys) -> None:  # type: ignore[no-untyped-def]
    argv = ["roofline", "--model", "deepseek-v3", "--cached", "8192", "--new", "512"]
    assert main([*argv, "--deployment", "h200x8"]) == 0
    out = capsys.readouterr().out
    assert "h200x8: per GPU" in out and "experts read per MoE layer" in out
    assert "weight bytes read" in out and "all-reduce time (ms)" in out

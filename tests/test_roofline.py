"""The analytic model: every figure recomputed here from the raw shapes, by independent
arithmetic (no helper of the module under test)."""

from __future__ import annotations

import pytest

from prefixscope.analysis.cost.gpus import GPUS, GpuSpec, register_gpu, resolve_gpu
from prefixscope.analysis.cost.models import CATALOG, ModelShape
from prefixscope.analysis.cost.roofline import (
    attention_flops_per_layer,
    linear_flops_per_layer,
    miss_and_hit,
    parameter_count,
    prefill_cost,
)

# (model, layers, hidden, intermediate, heads, kv heads, head dim, vocab), as published.
RAW = {
    "llama-3-8b": (32, 4096, 14336, 32, 8, 128, 128256),
    "llama-2-70b": (80, 8192, 28672, 64, 8, 128, 32000),
    "llama-3.1-70b": (80, 8192, 28672, 64, 8, 128, 128256),
}


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # q (h·h) + k, v (h·K·d each) + o (h·h) + MLP (3·h·I) + 2 norms, per layer; final norm;
        # embedding and untied LM head (2·V·h).
        ("llama-2-70b", 68_976_648_192),
        ("llama-3-8b", 8_030_261_248),
        ("llama-3.1-70b", 70_553_706_496),
    ],
)
def test_parameter_counts_come_from_the_shapes(model: str, expected: int) -> None:
    n, h, i, heads, kv, d, v = RAW[model]
    by_hand = n * (h * h + 2 * h * kv * d + h * h + 3 * h * i + 2 * h) + h + 2 * v * h
    assert by_hand == expected
    assert parameter_count(CATALOG[model]) == expected


def test_llama_2_70b_is_68_98_billion() -> None:
    assert round(parameter_count(CATALOG["llama-2-70b"]) / 1e9, 2) == 68.98


@pytest.mark.parametrize(
    ("model", "new", "cached"),
    [
        ("llama-3-8b", 2048, 0),
        ("llama-3-8b", 64, 2048),
        ("llama-3-8b", 1, 0),
        ("llama-2-70b", 4160, 0),
        ("llama-2-70b", 64, 4096),
        ("llama-3.1-70b", 131_072, 0),
        ("llama-3.1-70b", 17, 100_003),
    ],
)
def test_flops_and_bytes_by_independent_arithmetic(model: str, new: int, cached: int) -> None:
    n, h, i, heads, kv, d, v = RAW[model]
    shape, gpu = CATALOG[model], GPUS["h100"]
    linear = 2 * new * (h * heads * d * 2 + h * kv * d * 2 + 3 * h * i)
    # causal pairs: query j (0-based) of the new tokens sees cached + j + 1 keys
    pairs = (
        sum(cached + j + 1 for j in range(new))
        if new < 5000
        else new * cached + new * (new + 1) // 2
    )
    attention = pairs * heads * (2 * d + 2 * d)  # QKᵀ and PV, a multiply-add per element
    assert linear_flops_per_layer(shape, new) == linear
    assert attention_flops_per_layer(shape, new, cached) == attention
    cost = prefill_cost(shape, gpu, new, cached)
    head = 2 * v * h
    assert cost.flops == n * (linear + attention) + head
    weights = (h * heads * d * 2 + h * kv * d * 2 + 3 * h * i) * 2
    kv_bytes = 2 * kv * d * (cached + new) * 2
    q_out = 2 * heads * d * new * 2
    assert cost.bytes == n * (weights + kv_bytes + q_out) + v * h * 2
    per_op = [
        (linear, weights),
        (attention, kv_bytes + q_out),
    ]
    seconds = n * sum(max(f / 989e12, b / 3.35e12) for f, b in per_op)
    seconds += max(head / 989e12, v * h * 2 / 3.35e12)
    assert cost.seconds == pytest.approx(seconds, rel=1e-12)


def test_worked_example_llama_2_70b_hit_on_4096_cached_with_64_new() -> None:
    shape = CATALOG["llama-2-70b"]
    miss, hit = miss_and_hit(shape, GPUS["h100"], 4160, 4096)
    per_pair = 4 * 64 * 128  # both products, 64 heads of 128
    assert miss.attention.flops == per_pair * 4160 * 4161 // 2 == 283_603_107_840
    assert hit.attention.flops == per_pair * (64 * 4096 + 64 * 65 // 2) == 8_658_092_032
    assert miss.attention_flops == 80 * 283_603_107_840
    assert miss.attention.flops / hit.attention.flops == pytest.approx(32.756, abs=1e-3)


def test_worked_example_llama_3_1_70b_at_128k() -> None:
    shape = CATALOG["llama-3.1-70b"]
    cost = prefill_cost(shape, GPUS["h200"], 131_072, 0)
    per_layer = 4 * 64 * 128 * 131_072 * 131_073 // 2
    assert cost.attention.flops == per_layer == 281_477_124_194_304
    assert cost.attention_flops == 80 * per_layer
    assert cost.attention_flops / 989e12 == pytest.approx(22.77, abs=0.01)


def test_a_hit_linear_part_is_memory_bound_and_a_miss_compute_bound() -> None:
    shape, gpu = CATALOG["llama-3-8b"], GPUS["h100"]
    hit = prefill_cost(shape, gpu, 16, 8192)
    miss = prefill_cost(shape, gpu, 8192 + 16, 0)
    assert hit.linear.memory_s > hit.linear.compute_s  # intensity = new = 16 < ridge
    assert hit.linear.intensity == pytest.approx(16, rel=1e-9)
    assert miss.linear.compute_s > miss.linear.memory_s


def test_gpu_specs_by_name_device_name_or_custom() -> None:
    assert resolve_gpu("H200").mem_bandwidth == 4.8e12
    assert resolve_gpu("NVIDIA H100 80GB HBM3").name == "h100"
    assert resolve_gpu("NVIDIA A100-SXM4-80GB").name == "a100"
    custom = resolve_gpu("mygpu:400:1.6")
    assert (custom.peak_flops, custom.mem_bandwidth) == (400e12, 1.6e12)
    register_gpu(GpuSpec("x1", 1e15, 1e12))
    assert resolve_gpu("x1").ridge == 1000
    GPUS.pop("x1")
    with pytest.raises(ValueError, match="unknown GPU"):
        resolve_gpu("tpu")


def test_a_hugging_face_config_prices_like_the_catalog(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "num_hidden_layers": 80,
                "hidden_size": 8192,
                "intermediate_size": 28672,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "vocab_size": 32000,
            }
        )
    )
    shape = ModelShape.from_hf_config(cfg)
    assert parameter_count(shape) == parameter_count(CATALOG["llama-2-70b"])

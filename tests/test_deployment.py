"""A deployment's memory split: every figure recomputed from the raw shapes and datasheet
figures, the TP rules of GQA and MLA, and the refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.cost.deployment import (
    OVERHEAD_GIB,
    memory_split,
    parse_deployment,
    valid_tps,
)
from prefixscope.analysis.cost.models import CATALOG

GIB = 2**30


def test_llama_3_8b_on_one_h100_by_hand() -> None:
    split = memory_split(CATALOG["llama-3-8b"], parse_deployment("h100x1"))
    weights = 8_030_261_248 * 2  # bf16
    reserve = 8192 * (2 * 14336 + 4 * 4096) * 2 + OVERHEAD_GIB * GIB
    pool = 80 * GIB * 0.9 - weights - reserve
    assert split.kv_pool_gib * GIB == pytest.approx(pool, rel=1e-12)
    assert split.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB
    assert split.kv_pool_tokens == int(pool // 131072)
    assert split.kv_pool_blocks == int(pool // 131072) // 16


def test_deepseek_v3_on_eight_h200_by_hand() -> None:
    split = memory_split(CATALOG["deepseek-v3"], parse_deployment("h200x8"))
    # fp8 weights, 1/8 each; the latent (512 + 64) of every layer on every GPU
    assert split.weights_gib == pytest.approx(671.03e9 / 8 / GIB, rel=1e-4)
    assert split.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert split.kv_heads_per_gpu == 0


@pytest.mark.parametrize(
    ("model", "tp", "heads"),
    [
        ("llama-3-8b", 1, 8),
        ("llama-3-8b", 4, 2),
        ("llama-3-8b", 8, 1),
        ("llama-3-8b", 16, 1),  # replicated: max(1, 8 / 16)
        ("qwen3-235b-a22b", 4, 1),
        ("qwen3-235b-a22b", 8, 1),
    ],
)
def test_a_gpu_stores_its_share_of_the_kv_heads(model: str, tp: int, heads: int) -> None:
    shape = CATALOG[model]
    split = memory_split(shape, parse_deployment(f"b200x{tp}"), weight_dtype="fp8")
    assert split.kv_heads_per_gpu == heads
    assert split.kv_bytes_per_token == 2 * shape.num_hidden_layers * heads * shape.head_dim * 2


def test_tp_adds_kv_capacity_to_gqa_but_not_to_mla() -> None:
    llama = [memory_split(CATALOG["llama-3.3-70b"], parse_deployment(f"h200x{t}")) for t in (2, 8)]
    ds = [memory_split(CATALOG["deepseek-v3"], parse_deployment(f"b200x{t}")) for t in (8, 16)]
    # GQA: 4× the GPUs, a quarter of the heads each and more free HBM: over 4× the tokens
    assert llama[1].kv_pool_tokens > 4 * llama[0].kv_pool_tokens
    # MLA: each GPU still stores every token's whole latent; only freed weights add tokens
    assert ds[0].kv_bytes_per_token == ds[1].kv_bytes_per_token
    assert ds[1].kv_pool_tokens < 2 * ds[0].kv_pool_tokens


@given(
    model=st.sampled_from([m for m in CATALOG if m != "tiny-llama"]),
    gpu=st.sampled_from(["h100", "h200", "b200", "mi300x"]),
    utilization=st.floats(0.5, 1.0),
)
def test_the_split_adds_up(model: str, gpu: str, utilization: float) -> None:
    shape = CATALOG[model]
    for tp in valid_tps(shape)[:6]:
        try:
            s = memory_split(
                shape, parse_deployment(f"{gpu}x{tp}"), gpu_memory_utilization=utilization
            )
        except ValueError as exc:
            assert "does not fit" in str(exc)
            continue
        assert s.weights_gib + s.reserve_gib + s.kv_pool_gib == pytest.approx(s.budget_gib)
        assert s.budget_gib == pytest.approx(s.hbm_gib * utilization)
        assert s.kv_pool_blocks * s.block_size * s.kv_bytes_per_token <= s.kv_pool_gib * GIB


def test_weights_that_do_not_fit_name_the_smallest_tp_that_does() -> None:
    with pytest.raises(ValueError, match=r"does not fit on h100x1.* use h100x2 or more") as err:
        memory_split(CATALOG["llama-3.3-70b"], parse_deployment("h100"))
    assert "\n" not in str(err.value)
    memory_split(CATALOG["llama-3.3-70b"], parse_deployment("h100x2"))  # and it does fit
    with pytest.raises(ValueError, match="use h100x16"):
        memory_split(CATALOG["deepseek-v3"], parse_deployment("h100x8"))


@pytest.mark.parametrize(
    ("model", "deployment", "says"),
    [
        ("llama-3-8b", "h100x3", "TP 3 does not divide llama-3-8b's 32 attention heads"),
        ("llama-3-8b", "h100x0", "TP must be from 1"),
        ("llama-3-8b", "h100x2048", "TP must be from 1"),
        ("llama-3-8b", "q100x2", "unknown GPU 'q100'"),
        ("llama-3-8b", "h100x", "unknown GPU"),
        ("llama-3-8b", "mygpu:1:1", "a deployment is GPU or GPUxTP"),
    ],
)
def test_bad_deployments_are_refused_in_one_line(model: str, deployment: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as err:
        memory_split(CATALOG[model], parse_deployment(deployment))
    message = str(err.value)
    assert "\n" not in message and message.count(" — ") == 1


def test_a_kv_head_count_tp_cannot_shard_is_refused() -> None:
    from prefixscope.analysis.cost.models import ModelShape

    shape = ModelShape("odd", 4, 1536, 4096, 12, 6, 128, 1000)  # 6 KV heads
    assert valid_tps(shape) == [1, 2, 3, 6, 12]  # 4 divides 12 heads but not 6 KV heads
    with pytest.raises(ValueError, match="neither divides nor is a multiple"):
        memory_split(shape, parse_deployment("h100x4"))


@pytest.mark.parametrize("text", ["h100", "h100x1", "h200x8", "mi300x8", "mi300x", "l40sx4"])
def test_names_read_back(text: str) -> None:
    d = parse_deployment(text)
    assert parse_deployment(d.name) == d


def test_a_custom_gpu_without_hbm_cannot_be_sized(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "g.toml"
    path.write_text('name = "g"\ntflops = 100\ntbps = 2\n')
    with pytest.raises(ValueError, match="no HBM capacity"):
        memory_split(CATALOG["llama-3-8b"], parse_deployment(f"{path}x2"))
    path.write_text('name = "g"\ntflops = 100\ntbps = 2\nhbm_gib = 40\n')
    assert memory_split(CATALOG["llama-3-8b"], parse_deployment(f"{path}x2")).gpus == 2


def test_the_command_prints_the_split_and_refuses_in_one_line(capsys) -> None:  # noqa: ANN001
    from prefixscope.cli import main

    assert main(["deployment", "--model", "llama-3-8b", "--deployment", "h100x1,h100x2"]) == 0
    out = capsys.readouterr().out.splitlines()
    one = memory_split(CATALOG["llama-3-8b"], parse_deployment("h100x1"))
    assert out[1].split()[0] == "h100x1" and f"{one.kv_pool_blocks:,}" in out[1].split()
    assert main(["deployment", "--model", "llama-3.3-70b", "--deployment", "h100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prefixscope deployment: error: ")
    assert "use h100x2" in err


@settings(max_examples=100, deadline=None)
@given(
    utilization=st.floats(0.2, 1.0),
    block_size=st.sampled_from([1, 16, 512, 4096, 65536]),
    gpu=st.sampled_from(["l40s", "a100", "h100"]),
)
def test_a_split_it_returns_holds_a_whole_block(
    utilization: float, block_size: int, gpu: str
) -> None:
    """``memory_split`` is the one check that a pool holds a block (the fleet does not check
    again): every split it returns, whatever the budget, holds at least one."""
    try:
        split = memory_split(
            CATALOG["llama-3-8b"],
            parse_deployment(gpu),
            gpu_memory_utilization=utilization,
            block_size=block_size,
        )
    except ValueError as exc:
        assert "does not fit" in str(exc)
        return
    assert split.kv_pool_blocks >= 1

"""The GPU and model catalog: specs by name and from TOML files, and parameter counts from the
shapes against the totals the model cards publish."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixscope.analysis.cost.gpus import ALIASES, GPUS, resolve_gpu
from prefixscope.analysis.cost.models import CATALOG, GIB, ModelShape
from prefixscope.analysis.cost.params import experts_touched, parameter_count, weight_bytes
from prefixscope.analysis.cost.roofline import parameter_count as dense_count

# (model, published total, published active, tolerance): the model cards' figures.
PUBLISHED = [
    ("deepseek-v3", 671e9, 37e9, 0.02),  # DeepSeek-V3 model card: 671 B total, 37 B activated
    ("qwen3-235b-a22b", 235e9, 22e9, 0.025),  # Qwen3 model card: 235 B, 22 B activated
    ("gpt-oss-120b", 116.83e9, 5.13e9, 0.005),  # gpt-oss model card: 116.83 B, 5.13 B active
    ("llama-3.1-8b", 8.03e9, None, 0.005),  # Llama 3.1 model card: 8 B (8,030,261,248)
    ("llama-3.3-70b", 70.6e9, None, 0.005),  # Llama 3.3 model card: 70 B (70.6 B)
]


@pytest.mark.parametrize(("model", "total", "active", "tolerance"), PUBLISHED)
def test_parameter_counts_match_the_model_cards(
    model: str, total: float, active: float | None, tolerance: float
) -> None:
    count = parameter_count(CATALOG[model])
    assert count.total == pytest.approx(total, rel=tolerance)
    if active is not None:
        assert count.active == pytest.approx(active, rel=tolerance)


def test_gpt_oss_weights_in_hbm_are_its_checkpoint() -> None:
    # the model card: a 60.8 GiB checkpoint, experts in mxfp4 (4.25 bits), the rest in bf16
    assert weight_bytes(CATALOG["gpt-oss-120b"]) / GIB == pytest.approx(60.8, rel=0.005)


def test_deepseek_v3_experts_by_hand() -> None:
    # 58 MoE layers × 256 experts × 3 × 7,168 × 2,048: the experts are 98% of the model
    count = parameter_count(CATALOG["deepseek-v3"])
    assert count.routed_experts == 58 * 256 * 3 * 7168 * 2048
    assert count.routed_experts / count.total > 0.97


@pytest.mark.parametrize("model", [m for m, s in CATALOG.items() if not (s.moe or s.mla)])
def test_dense_counts_agree_with_the_roofline(model: str) -> None:
    count = parameter_count(CATALOG[model])
    assert count.total == dense_count(CATALOG[model])
    assert count.active == count.total - count.embedding  # all but the lookup


@given(
    k=st.integers(1, 16),
    extra=st.integers(0, 300),
    n=st.integers(1, 10_000),
)
def test_experts_touched_lies_between_k_and_all(k: int, extra: int, n: int) -> None:
    experts = k + extra
    touched = experts_touched(n, k, experts)
    assert k - 1e-9 <= touched <= experts + 1e-9
    assert experts_touched(n + 1, k, experts) >= touched - 1e-9  # more tokens, no fewer


@pytest.mark.parametrize(("n", "expected"), [(1, 8.0), (2, 8 + 8 * (1 - 8 / 256))])
def test_experts_touched_by_counting(n: int, expected: float) -> None:
    # one token: its k; two: the second adds each of its k with the chance the first missed it
    assert experts_touched(n, 8, 256) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("a100", "a100"),
        ("H100", "h100"),
        ("h100-80gb", "h100"),
        ("a100-80gb", "a100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA L40S", "l40s"),
        ("AMD Instinct MI300X", "mi300x"),
        ("mi300", "mi300x"),
    ],
)
def test_gpus_by_name(text: str, name: str) -> None:
    assert resolve_gpu(text).name == name


def test_every_gpu_has_every_figure_and_the_old_ones_are_unchanged() -> None:
    for spec in GPUS.values():
        assert all(
            v is not None
            for v in (spec.hbm_gib, spec.host_dram_gib, spec.host_link_gbps, spec.nvlink_gbps)
        )
        assert spec.price_hour and spec.price_hour > 0
    # the roofline's figures the demo prints
    assert [(GPUS[g].peak_flops, GPUS[g].mem_bandwidth) for g in ("a100", "h100", "h200")] == [
        (312e12, 2.039e12),
        (989e12, 3.35e12),
        (989e12, 4.8e12),
    ]
    assert set(ALIASES.values()) <= set(GPUS)


def test_the_short_form_still_works() -> None:
    spec = resolve_gpu("mygpu:400:1.6")
    assert (spec.peak_flops, spec.mem_bandwidth, spec.hbm_gib) == (400e12, 1.6e12, None)


def test_a_gpu_from_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "h20.toml"
    path.write_text('name = "H20"\ntflops = 148\ntbps = 4.0\nhbm_gib = 96\nprice_hour = 1.8\n')
    spec = resolve_gpu(str(path))
    assert (spec.name, spec.peak_flops, spec.mem_bandwidth) == ("h20", 148e12, 4e12)
    assert (spec.hbm_gib, spec.price_hour, spec.nvlink_gbps) == (96, 1.8, None)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("tflops = 1\ntbps = 1\n", "no 'name'"),
        ('name = "g"\ntbps = 1\n', "no 'tflops'"),
        ('name = "g"\ntflops = true\ntbps = 1\n', "'tflops' must be a number"),
        ('name = "g"\ntflops = 1\ntbps = 1\nhbm_gib = 0\n', "'hbm_gib' must be a number above 0"),
        ('name = "g"\ntflops = 1\ntbps = 1\nprice_hour = -1\n', "'price_hour'"),
        ('name = "g"\ntflops = 1\ntbps = 1\nnvlink_gbps = nan\n', "'nvlink_gbps'"),
        ('name = "g"\ntflops = 1e9\ntbps = 1\n', "'tflops'"),
        ('name = "g"\ntflops = 1\ntbps = 1\nhbm = 80\n', "unknown key 'hbm'"),
        ('name = "g"\ntflops = "1"\ntbps = 1\n', "'tflops' must be a number"),
        ('name = "a b"\ntflops = 1\ntbps = 1\n', "'name'"),
        ("name = \n", "not TOML"),
    ],
)
def test_a_bad_gpu_file_is_refused_in_one_line(tmp_path: Path, body: str, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ValueError, match=says) as err:
        resolve_gpu(str(path))
    message = str(err.value)
    assert "\n" not in message and " — " in message and str(path) in message


def test_a_missing_gpu_file_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="cannot read"):
        resolve_gpu("/nonexistent/g.toml")


def _write(tmp_path: Path, config: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(config)
    return path


@pytest.mark.parametrize(
    ("config", "experts", "per_token", "width", "shared", "dense"),
    [
        # DeepSeek's spelling
        (
            '"n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,'
            ' "n_shared_experts": 1, "first_k_dense_replace": 3',
            256, 8, 2048, 1, 3,
        ),
        # Qwen's
        ('"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536',
         128, 8, 1536, 0, 0),
        # Mixtral's and gpt-oss's: an expert is intermediate_size wide
        ('"num_local_experts": 8, "num_experts_per_tok": 2', 8, 2, 14336, 0, 0),
    ],
)  # fmt: skip
def test_expert_layouts_from_config_json(
    tmp_path: Path, config: str, experts: int, per_token: int, width: int, shared: int, dense: int
) -> None:
    base = (
        '"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,'
        ' "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000'
    )
    shape = ModelShape.from_hf_config(_write(tmp_path, "{" + base + ", " + config + "}"))
    got = (shape.experts, shape.experts_per_token, shape.moe_intermediate_size)
    assert got == (experts, per_token, width)
    assert (shape.shared_experts, shape.dense_layers) == (shared, dense)


@pytest.mark.parametrize(
    ("extra", "window", "sliding"),
    [
        (
            '"sliding_window": 128, "layer_types": '
            + str(["sliding_attention", "full_attention"] * 2).replace("'", '"'),
            128,
            2,
        ),  # noqa: E501
        ('"sliding_window": 1024, "sliding_window_pattern": 2', 1024, 2),
        ('"sliding_window": 4096', 4096, 4),  # Mistral-7B v0.1: every layer
        ('"sliding_window": 131072, "use_sliding_window": false', None, 0),  # Qwen2
        ("", None, 0),
    ],
)
def test_sliding_layers_from_config_json(
    tmp_path: Path, extra: str, window: int | None, sliding: int
) -> None:
    base = '"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4'
    body = "{" + base + (", " + extra if extra else "") + "}"
    shape = ModelShape.from_hf_config(_write(tmp_path, body))
    assert (shape.sliding_window, shape.sliding_layers) == (window, sliding)


@pytest.mark.parametrize(
    ("extra", "qk_norm"),
    [
        ('"model_type": "qwen3"', True),
        ('"model_type": "qwen3_moe"', True),
        ('"model_type": "minimax_m2", "use_qk_norm": true', True),
        ('"model_type": "qwen3", "use_qk_norm": false', False),  # the config's word wins
        ('"model_type": "llama"', False),
        ('"model_type": ["qwen3"]', False),  # not a name: no claim
        ("", False),
    ],
)
def test_q_and_k_norms_from_config_json(tmp_path: Path, extra: str, qk_norm: bool) -> None:
    base = '"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4'
    body = "{" + base + (", " + extra if extra else "") + "}"
    assert ModelShape.from_hf_config(_write(tmp_path, body)).qk_norm is qk_norm


@pytest.mark.parametrize(
    "config",
    [
        '"num_local_experts": 8, "num_experts_per_tok": 9',
        '"num_local_experts": 8, "num_experts_per_tok": true',
        '"num_local_experts": 8',
        '"n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 99',
        '"sliding_window": 8, "layer_types": ["sliding_attention"]',
        '"use_qk_norm": "yes"',
        '"use_qk_norm": 1',
    ],
)
def test_bad_expert_or_window_keys_are_refused(tmp_path: Path, config: str) -> None:
    base = '"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4'
    with pytest.raises(ValueError, match="config.json: key") as err:
        ModelShape.from_hf_config(_write(tmp_path, "{" + base + ", " + config + "}"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("tokens", "block", "sliding_blocks"),
    [(16, 16, 1), (128, 16, 8), (4096, 16, 8), (4096, 32, 4), (100, 64, 2)],
)
def test_a_cached_prefix_keeps_only_a_window_on_sliding_layers(
    tokens: int, block: int, sliding_blocks: int
) -> None:
    shape = CATALOG["gpt-oss-120b"]  # window 128: ceil(127 / block) blocks per sliding layer
    per_layer_block = block * 2 * 8 * 64 * 2
    blocks = -(-tokens // block)
    expected = (18 * blocks + 18 * sliding_blocks) * per_layer_block
    assert shape.prefix_kv_bytes(tokens, block) == expected
    assert shape.window_blocks(block) == -(-127 // block)
    # a dense model keeps every block on every layer
    llama = CATALOG["llama-3-8b"]
    assert llama.prefix_kv_bytes(tokens, block) == blocks * block * llama.kv_bytes_per_token()


@pytest.mark.parametrize("name", ["h100", "H200", "h100-80gb", "my-h100"])
def test_a_custom_gpu_never_takes_a_name_the_catalog_reads_as_its_own(
    tmp_path: Path, name: str
) -> None:
    """A GPU file named ``h100`` (1,000 GiB of HBM) would be priced, sized and linked as the
    catalog's H100 wherever a later step looks it up by name: refused, in either form."""
    path = tmp_path / "g.toml"
    path.write_text(f'name = "{name}"\ntflops = 400\ntbps = 2.0\nhbm_gib = 1000\n')
    for text in (str(path), f"{name}:400:2.0"):
        with pytest.raises(ValueError, match="reads as the catalog's h") as caught:
            resolve_gpu(text)
        assert "\n" not in str(caught.value) and " — " in str(caught.value)

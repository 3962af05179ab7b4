"""The measured-kernel cost model: its tables, their interpolation, the step it prices, and the
serving model its error against real runs is measured with."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.cost import kernels
from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.measured import (
    Fixed,
    covers,
    error_pct,
    fixed_costs,
    fixed_for,
    measured_model,
)
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.roofline import prefill_cost
from prefixscope.analysis.cost.serving import steady_state, wave
from prefixscope.analysis.fleet.stepcost import from_measured

GPUS = ("a100", "h100", "h200", "b200")


def test_every_gpu_table_is_shipped_with_its_provenance() -> None:
    info = kernels.provenance()
    assert len(info["commit"]) == 40 and info["license"] == "Apache-2.0"
    assert set(info["gpus"]) == set(GPUS)
    for gpu in GPUS:
        tables = kernels.load(gpu)
        assert tables is not None and tables.vllm == info["gpus"][gpu]["vllm"]
        assert info["gpus"][gpu]["files"], gpu
        for key, value in tables.arrays.items():  # filled on load: no hole left inside a grid
            if key.endswith("_ms"):
                assert np.isfinite(value).all(), (gpu, key)


@pytest.mark.parametrize(
    ("cube", "xs", "power", "want"),
    [
        ([1.0, np.nan, 4.0], [1, 2, 4], 1.0, [1.0, 2.0, 4.0]),  # nearest below (log-equal: first)
        ([np.nan, 2.0, np.nan], [1, 2, 4], 1.0, [1.0, 2.0, 4.0]),
        ([np.nan, 3.0, np.nan], [1, 2, 4], 2.0, [0.75, 3.0, 12.0]),
        ([np.nan, np.nan], [1, 2], 1.0, [np.nan, np.nan]),  # nothing measured: stays a hole
    ],
)
def test_fill_scales_the_nearest_measured_point(cube, xs, power, want) -> None:  # noqa: ANN001
    got = kernels.fill(np.array([cube]), 1, np.array(xs, float), power)[0]
    np.testing.assert_allclose(got, want, equal_nan=True)


@pytest.mark.parametrize(("x", "want"), [(1, 2.0), (4, 8.0), (2, 4.0), (16, 32.0), (0.5, 2.0)])
def test_interp_is_log_log_inside_and_scales_by_the_work_beyond(x: float, want: float) -> None:
    xs, ys = np.array([1.0, 4.0, 8.0]), np.array([2.0, 8.0, 16.0])
    assert float(kernels.interp(x, xs, ys, 1.0)) == pytest.approx(want)


@pytest.mark.parametrize("gpu", ("h100", "h200", "b200"))
def test_a_gemm_on_the_grid_is_the_measured_point(gpu: str) -> None:
    tables = kernels.load(gpu)
    a = tables.arrays
    for i, j, m in ((3, 5, 7), (10, 2, 0), (21, 21, 21)):
        n, k, rows = a["gemm_bf16_n"][i], a["gemm_bf16_k"][j], a["gemm_bf16_m"][m]
        assert float(tables.gemm(rows, n, k, "bf16")) == pytest.approx(
            a["gemm_bf16_ms"][m, i, j], rel=1e-9
        )


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("model", ("llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"))
def test_measured_is_never_faster_than_the_roofline(gpu: str, model: str) -> None:
    """The roofline runs every kernel at 100% of the datasheet's peak: a lower bound that
    measured kernels (bf16, dense) must not beat."""
    shape = resolve_model(model)
    tp = 8 if model != "llama-3.1-8b" else 1
    if covers(shape, gpu, tp, "bf16") is not None:
        pytest.skip(covers(shape, gpu, tp, "bf16"))
    m = measured_model(shape, gpu, tp, "bf16")
    new, cached = np.meshgrid([1.0, 64, 1024, 8192, 32768], [0.0, 4096, 65536])
    measured = m.prefill_seconds(new.ravel(), cached.ravel())
    roof = prefill_cost(shape, resolve_gpu(gpu), new.ravel(), cached.ravel(), "bf16", tp).seconds
    assert (measured >= roof).all(), float((measured / roof).min())


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "covered"),
    [
        ("llama-3.1-8b", "h100", 1, True),
        ("deepseek-v3", "h200", 8, True),
        ("qwen3-235b-a22b", "h200", 4, True),
        ("gpt-oss-120b", "b200", 2, True),
        ("llama-3.1-8b", "mi300x", 1, False),  # no tables for the GPU
        ("llama-3.1-8b", "l40s", 1, False),
        ("deepseek-v3", "a100", 8, False),  # no fp8 on an A100's tables
        ("llama-3.1-8b", "h100", 3, False),  # a TP vLLM refuses
    ],
)
def test_covers_names_why_not(model: str, gpu: str, tp: int, covered: bool) -> None:
    why = covers(resolve_model(model), gpu, tp)
    assert (why is None) == covered, why
    if not covered:
        assert "\n" not in why and len(why) < 300


def test_a_hit_costs_less_than_its_miss_and_more_than_nothing() -> None:
    m = measured_model(resolve_model("llama-3.1-70b"), "h200", 4)
    for total in (2048, 16384, 65536):
        for hit in (0.5, 0.9, 0.99):
            new = max(1, round(total * (1 - hit)))
            miss, hit_s = m.prefill_seconds(total, 0), m.prefill_seconds(new, total - new)
            assert 0 < hit_s < miss


def test_the_step_form_fits_the_measured_model() -> None:
    for name, gpu, tp in (("llama-3-8b", "h100", 1), ("llama-3.3-70b", "h200", 4)):
        cost, median, p90 = from_measured(measured_model(resolve_model(name), gpu, tp))
        assert cost.source == "measured"
        assert median < 5 and p90 < 15, (name, median, p90)


@pytest.mark.parametrize(
    ("model", "qk_norm"), [("qwen3-32b", True), ("minimax-m2.5", True), ("llama-3.1-70b", False)]
)
def test_the_fixed_cost_of_q_and_k_norms_falls_on_the_models_that_have_them(
    model: str, qk_norm: bool
) -> None:
    """γ per layer and step, on top of α and β, only where the model normalises q and k."""
    shape = resolve_model(model)
    assert shape.qk_norm is qk_norm
    m = measured_model(shape, "h200", 4)
    plain = replace(m, fixed=Fixed(0.5, 0.01, 0.0))
    normed = replace(m, fixed=Fixed(0.5, 0.01, 0.04))
    step = (8, 2048, [(512, 0)])
    extra_ms = normed.step_seconds(*step) - plain.step_seconds(*step)
    want = 0.04 * shape.num_hidden_layers if qk_norm else 0.0
    assert extra_ms * 1e3 == pytest.approx(want, abs=1e-9)
    per_layer = 0.01 + (0.04 if qk_norm else 0.0)
    layers = shape.num_hidden_layers
    assert Fixed(0.5, 0.01, 0.04).ms(shape) == pytest.approx(0.5 + per_layer * layers)


def test_the_shipped_fixed_cost_is_the_fitted_one() -> None:
    """What ``plan`` and the fleet price with is the file ``measured_error.py --write`` wrote,
    γ included, and the model's error it came with."""
    data = fixed_costs()["default"]
    fixed = fixed_for("h200")
    assert (fixed.alpha_ms, fixed.beta_ms, fixed.qk_norm_ms) == (
        data["alpha_ms"], data["beta_ms"], data["qk_norm_ms"]
    )  # fmt: skip
    assert set(error_pct()) >= {"ttft_median", "ttft_p90", "tpot_median", "tpot_p90"}


def constant(tau: float):  # noqa: ANN201
    return lambda decodes, keys, chunks: tau


@pytest.mark.parametrize(
    ("isl", "budget", "steps"), [(1000, 8192, 1), (8192, 8192, 1), (9000, 4096, 3)]
)
def test_one_request_alone(isl: int, budget: int, steps: int) -> None:
    """In a wave its prompt takes whole steps; spread evenly, its share of the steps its
    chunks fill (no other request decodes beside it)."""
    for how, want in ((wave, steps), (steady_state, max(1.0, isl / budget))):
        served = how(constant(0.01), 1, isl, 50, budget)
        assert served.ttft_s == pytest.approx(want * 0.01)
        assert served.tpot_s == pytest.approx(0.01)


def test_a_wave_beyond_the_pool_waits_for_the_one_before() -> None:
    free = wave(constant(0.01), 8, 100, 11)
    tight = wave(constant(0.01), 8, 100, 11, pool_tokens=4 * 111)
    assert tight.running == 4 and free.running == 8
    assert tight.ttft_s > free.ttft_s


@settings(max_examples=30, deadline=None)
@given(
    c=st.integers(1, 64),
    isl=st.integers(1, 20000),
    osl=st.integers(2, 2000),
)
def test_more_concurrency_never_makes_a_token_faster(c: int, isl: int, osl: int) -> None:
    """With a step time growing in its tokens, a busier server is never faster."""

    def step(decodes: float, keys: float, chunks: list[tuple[float, float]]) -> float:
        return 0.005 + 1e-6 * (decodes + sum(n for n, _ in chunks))

    for how in (wave, steady_state):
        one, more = how(step, c, isl, osl), how(step, c + 1, isl, osl)
        # to within 0.01%: spread evenly, a prompt that fills less of a busier step's budget
        # is split over more, shorter steps
        assert more.tpot_s >= one.tpot_s * (1 - 1e-4)
        assert math.isfinite(more.ttft_s) and more.ttft_s > 0


@pytest.mark.parametrize(
    ("part", "miss", "hit"),
    [("llama-3-8b", 0.744, 0.55), ("llama-3.1-70b-8-layers", 0.83, 0.676)],
)
def test_the_gpu_check_sets_the_measured_model_against_its_gpu(
    part: str, miss: float, hit: float
) -> None:
    """The committed H200 run: vLLM's kernels (the tables) are faster than this project's
    torch replay on the same GPU, hits more so (docs/miss_cost.md)."""
    from pathlib import Path

    from prefixscope.gpu_replay.check import measured_figures, read_part

    root = Path(__file__).resolve().parents[1]
    bench = read_part(root / "benchmarks/gpu_results/2026-12-04-h200/parts" / f"{part}.json")
    figures = measured_figures(bench)
    assert figures is not None and figures["shapes"] >= 10
    assert figures["miss_ratio_median"] == pytest.approx(miss, abs=0.005)
    assert figures["hit_ratio_median"] == pytest.approx(hit, abs=0.005)
    assert figures["miss_ratio_min"] <= figures["miss_ratio_median"] <= figures["miss_ratio_max"]
    cpu = dict(bench, gpu={**bench["gpu"], "name": "cpu"})
    assert measured_figures(cpu) is None  # no tables for the CPU


@pytest.mark.parametrize(
    ("model", "gpu", "tp"), [("deepseek-v3", "h200", 8), ("llama-3-8b", "h100", 1)]
)
def test_the_table_that_prices_millions_of_requests_is_the_model(
    model: str, gpu: str, tp: int
) -> None:
    from prefixscope.analysis.cost.measured import TABULATE_ABOVE, many, tabulated

    m = measured_model(resolve_model(model), gpu, tp)
    rng = np.random.default_rng(7)
    new = np.exp(rng.uniform(0, np.log(150_000), 20_000)).round()
    cached = np.where(rng.random(20_000) < 0.3, 0, rng.integers(1, 300, 20_000) * 512.0)
    exact = m.prefill_seconds(new, cached)
    err = np.abs(tabulated(m, 150_000, 300 * 512)(new, cached) / exact - 1)
    assert np.median(err) < 1e-4 and err.max() < 5e-3
    # past its edge, the model itself
    assert tabulated(m, 1000, 1000)(np.array([5000.0]), np.array([0.0]))[0] == pytest.approx(
        float(m.prefill_seconds(5000.0, 0.0))
    )
    big = np.resize(new, TABULATE_ABOVE + 1)
    assert np.allclose(many(m)(big, np.zeros_like(big)), m.prefill_seconds(big, 0 * big), rtol=5e-3)


H200_TABLES = "benchmarks/gpu_results/2026-12-04-h200-tables/tables_check.json"


@pytest.mark.parametrize(
    ("kind", "low", "high"),
    [
        ("gemm_bf16", 0.95, 1.05),  # vLLM's GEMMs are cuBLAS's: the tables hold on this H200
        ("gemm_fp8", 1.0, 1.2),  # vLLM's fp8 GEMM is slower than cuBLASLt's at small m
        ("context", 0.5, 0.7),  # vLLM's FlashAttention 3 against torch's flash kernel
        ("generation", 0.75, 0.95),
    ],
)
def test_the_h200_run_sets_each_table_against_the_same_kernels_timed_there(
    kind: str, low: float, high: float
) -> None:
    """The committed H200 run of ``gpu_replay/tables.py`` (docs/miss_cost.md): its summary is
    its points', and each kind's median is where the docs say."""
    import json
    from pathlib import Path

    from prefixscope.gpu_replay.tables import summarise

    run = json.loads((Path(__file__).resolve().parents[1] / H200_TABLES).read_text())
    assert run["device"]["device_name"] == "NVIDIA H200" and run["tables"]["gpu"] == "h200"
    again = summarise(run["points"])
    assert again == run["summary"]
    for p in run["points"]:
        assert p["ratio"] == pytest.approx(
            p["rule_here_ms"] / p["measured_ms"] if p["kind"] == "chunk"
            else p["table_ms"] / p["measured_ms"]
        )  # fmt: skip
    assert low <= again[kind]["ratio_median"] <= high


def test_the_chunk_rule_on_the_h200_within_a_quarter_from_256_new_tokens() -> None:
    """The rule for a chunk after a prefix (``measured.py``), applied to the whole prefill and
    the decode timed there, against the chunk timed there: within 25% from 256 new tokens,
    and under (a short chunk after a long prefix costs more than one decode) below."""
    import json
    from pathlib import Path

    run = json.loads((Path(__file__).resolve().parents[1] / H200_TABLES).read_text())
    chunks = [p for p in run["points"] if p["kind"] == "chunk"]
    long = [p["ratio"] for p in chunks if p["new"] >= 256]
    short = [p["ratio"] for p in chunks if p["new"] < 256]
    assert len(long) >= 8 and all(0.75 <= r <= 1.25 for r in long)
    assert short and all(r < 0.75 for r in short)


@pytest.mark.parametrize(
    ("model", "names"),
    [("llama-3-8b", (6144, 4096, 28672, 4096)), ("tiny-llama", (512, 256, 1024, 256))],
)
def test_the_tables_check_times_each_projection_at_its_own_shape(model: str, names) -> None:
    from prefixscope.gpu_replay.tables import projections

    shape = resolve_model(model)
    got = projections(shape)
    assert tuple(n for _, n, _ in got) == names
    assert [k for _, _, k in got] == [
        shape.hidden_size, shape.num_attention_heads * shape.head_dim,
        shape.hidden_size, shape.intermediate_size,
    ]  # fmt: skip

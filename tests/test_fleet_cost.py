"""A replica's step cost: the roofline written in the cost model's form, and a calibrated
model taken as it is."""

from __future__ import annotations

import numpy as np
import pytest

from prefixscope.analysis.cost.costmodel import CostModel
from prefixscope.analysis.cost.deployment import valid_tps
from prefixscope.analysis.cost.gpus import GPUS
from prefixscope.analysis.cost.models import CATALOG
from prefixscope.analysis.cost.roofline import prefill_cost
from prefixscope.analysis.fleet.stepcost import from_cost_model, from_roofline

NEW = np.array([1, 2, 8, 64, 256, 1024, 4096, 8192, 32768], dtype=float)
CACHED = np.array([0, 512, 4096, 32768, 131072], dtype=float)
PUBLISHED = [m for m in CATALOG if m != "tiny-llama" and not (CATALOG[m].mla or CATALOG[m].moe)]


@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("model", PUBLISHED)
def test_the_roofline_step_cost_is_the_roofline_within_one_percent(model: str, gpu: str) -> None:
    new, cached = (a.ravel() for a in np.meshgrid(NEW, CACHED))
    step = from_roofline(CATALOG[model], GPUS[gpu])
    exact = prefill_cost(CATALOG[model], GPUS[gpu], new, cached).seconds
    error = np.abs(step.prefill_seconds(new, cached) - exact) / exact
    assert error.max() < 0.01


MOE = [m for m in CATALOG if CATALOG[m].moe]
NVLINK = [g for g in GPUS if GPUS[g].nvlink_gbps]


def _error(model: str, gpu: str, tp: int) -> tuple[np.ndarray, np.ndarray]:
    new, cached = (a.ravel() for a in np.meshgrid(NEW, CACHED))
    step = from_roofline(CATALOG[model], GPUS[gpu], tp=tp)
    exact = prefill_cost(CATALOG[model], GPUS[gpu], new, cached, tp=tp).seconds
    return new, (step.prefill_seconds(new, cached) - exact) / exact


@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("model", MOE)
def test_a_mixture_of_experts_step_of_256_tokens_or_more_is_within_ten_percent(
    model: str, gpu: str
) -> None:
    # 256 tokens touch every expert of these models but a 10⁻⁴ of one (E·(1 − k/E)^256)
    new, error = _error(model, gpu, 1)
    assert np.abs(error[new >= 256]).max() < 0.10
    # a smaller step reads fewer experts than the form's flat part: over-priced, never under
    assert error[new < 256].min() > -0.10


def test_one_token_of_deepseek_v3_is_over_priced_by_the_experts_it_does_not_read() -> None:
    # the form reads all 256 experts of 58 layers where one token reads 8: 61 layers of
    # fixed weights (attention, router, shared; 3 dense MLPs) and the LM head, and 8 experts
    # against all 256, in fp8
    fixed = 3 * (187_107_328 + 3 * 7168 * 18432) + 58 * (187_107_328 + 256 * 7168 + 44_040_192)
    fixed += 129_280 * 7168
    expert = 58 * 44_040_192
    ratio = (fixed + 256 * expert) / (fixed + 8 * expert)
    new, error = _error("deepseek-v3", "h200", 1)
    one = error[(new == 1)]
    assert ratio == pytest.approx(18.30, abs=0.01)
    assert one.max() == pytest.approx(ratio - 1, rel=0.01)


@pytest.mark.parametrize("gpu", NVLINK)
@pytest.mark.parametrize("model", [m for m in [*PUBLISHED, *MOE] if 8 in valid_tps(CATALOG[m])])
def test_at_tp_8_the_all_reduces_keep_the_step_form_within_its_bound(model: str, gpu: str) -> None:
    # the bound x − 1 of the knee that balances the form's two worst errors (stepcost.py):
    # 27% at the largest all-reduce share in the catalog (gpt-oss-120b, r = 0.58 on an H200)
    new, error = _error(model, gpu, 8)
    bound = 0.28
    if CATALOG[model].moe:
        assert np.abs(error[new >= 256]).max() < bound
    else:
        assert np.abs(error).max() < bound


def test_tp_1_keeps_the_dense_step_cost_exactly() -> None:
    h100, shape = GPUS["h100"], CATALOG["llama-3-8b"]
    step = from_roofline(shape, h100, tp=1)
    params = 4096 * 128 * (64 + 16) + 3 * 4096 * 14336
    assert step.b == 2.0 * params * 32 / h100.peak_flops
    assert step.k1 == 2 * h100.peak_flops / (2 * h100.mem_bandwidth)


def test_the_roofline_knees_are_where_the_products_turn_compute_bound() -> None:
    h100 = GPUS["h100"]
    step = from_roofline(CATALOG["llama-3-8b"], h100)
    assert step.k1 == pytest.approx(2 * h100.peak_flops / (2 * h100.mem_bandwidth))
    # 8 KV heads for 32 query heads: a quarter of the linear layers' knee
    assert step.k2 == pytest.approx(step.k1 * 8 / 32)
    assert step.source == "roofline" and step.c == 0


def test_a_calibrated_model_prices_one_prefill_as_itself() -> None:
    fitted = CostModel((1e-3, 2e-6, 3e-9, 4e-12, 5e-13), (64, 16))
    step = from_cost_model(fitted, run_id="r1")
    new, cached = np.array([1.0, 100, 5000]), np.array([0.0, 300, 9000])
    np.testing.assert_allclose(step.prefill_seconds(new, cached), fitted.seconds(new, cached))
    assert (step.source, step.run_id) == ("calibrated", "r1")

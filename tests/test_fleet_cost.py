"""A replica's step cost: the roofline written in the cost model's form, and a calibrated
model taken as it is."""

from __future__ import annotations

import numpy as np
import pytest

from prefixscope.analysis.cost.costmodel import CostModel
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

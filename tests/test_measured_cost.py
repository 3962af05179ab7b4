"""The measured-kernel model as a cost model: ``roofline --cost-model measured`` and the one rule
(``cost/choice.py``) by which every stage picks calibrated, measured or roofline."""

from __future__ import annotations

import numpy as np
import pytest

from prefixscope.analysis.cost.choice import chosen
from prefixscope.analysis.cost.gpus import GpuSpec, resolve_gpu
from prefixscope.analysis.cost.measured import measured_model
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.savings import cost_model
from prefixscope.analysis.fleet.settings import FleetSettings
from prefixscope.analysis.fleet.stepcost import choose
from prefixscope.analysis.plan.slo_settings import step_cost
from prefixscope.cli import main
from prefixscope.stages import plan_slo
from prefixscope.stages.savings import SavingsSettings

FITTED = ("run-1", (1e-3, 1e-6, 0.0, 1e-11, 1e-12), (64.0, 16.0))


def rows_of(out: str) -> dict[str, tuple[int, list[str]]]:
    """Each table row's label → (line number, its figures as printed)."""
    rows = {}
    for i, line in enumerate(out.splitlines()):
        label, figures = line[:28].strip(), line[28:].split()
        rows[label] = (i, figures)
    return rows


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f}"


# -- roofline --cost-model measured ------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "model", "gpu", "tp", "cached", "new", "dtype"),
    [
        (["--gpu", "h100"], "llama-3-8b", "h100", 1, 4096, 512, None),
        (["--deployment", "h200x8"], "deepseek-v3", "h200", 8, 8192, 1024, None),
        (["--gpu", "h100", "--weight-dtype", "fp8"], "llama-3-8b", "h100", 1, 2048, 128, "fp8"),
    ],
)
def test_the_measured_row_is_the_measured_models_miss_and_hit(
    capsys, where, model, gpu, tp, cached, new, dtype
) -> None:  # type: ignore[no-untyped-def]
    argv = ["roofline", "--model", model, *where, "--cached", str(cached), "--new", str(new)]
    assert main([*argv, "--cost-model", "measured"]) == 0
    rows = rows_of(capsys.readouterr().out)
    (at, roofline), (under, figures) = rows["roofline time (ms)"], rows["measured time (ms)"]
    assert under == at + 1  # directly under the roofline's row
    m = measured_model(resolve_model(model), gpu, tp, dtype)
    miss, hit = m.prefill_seconds(np.array([cached + new, new]), np.array([0, cached]))
    assert figures[:2] == [ms(miss), ms(hit)]
    if dtype is None:  # the roofline, at bf16 peak FLOP/s, is a lower bound of bf16 kernels
        for bound, time in zip(roofline[:2], figures[:2], strict=True):
            assert float(bound.replace(",", "")) <= float(time.replace(",", ""))
    # auto (the default) prints the same row where the tables cover; roofline leaves it out
    assert main(argv) == 0
    assert rows_of(capsys.readouterr().out)["measured time (ms)"] == (under, figures)
    assert main([*argv, "--cost-model", "roofline"]) == 0
    assert "measured time (ms)" not in rows_of(capsys.readouterr().out)


def test_fp8_weights_read_the_fp8_tables() -> None:
    shape = resolve_model("llama-3-8b")
    bf16 = measured_model(shape, "h100", 1).prefill_seconds(8192.0, 0.0)
    fp8 = measured_model(shape, "h100", 1, "fp8").prefill_seconds(8192.0, 0.0)
    assert fp8 < bf16  # a compute-bound miss at the fp8 tensor-core rate


@pytest.mark.parametrize(
    ("where", "why"),
    [
        (["--gpu", "l40s"], "no measured kernels for GPU 'l40s'"),
        (["--deployment", "mi300x"], "no measured kernels for GPU 'mi300x'"),
        (["--gpu", "mygpu:989:3.35"], "mygpu is a custom GPU spec"),
        (["--gpu", "a100", "--model", "deepseek-v3", "--deployment", "a100x8"], "no fp8 GEMMs"),
    ],
)
def test_measured_where_the_tables_do_not_cover_is_refused_in_one_line(capsys, where, why) -> None:  # type: ignore[no-untyped-def]
    argv = ["roofline", *where, "--cached", "100", "--new", "10"]
    assert main([*argv, "--cost-model", "measured"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and not captured.out, captured.err
    assert lines[0].startswith("prefixscope roofline: error: ") and why in lines[0]
    assert "--cost-model roofline or auto" in lines[0] and "Traceback" not in captured.err
    # auto prices it with the roofline alone
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "roofline time (ms)" in out and "measured time (ms)" not in out


# -- the one rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "fitted", "kind", "source"),
    [
        ("llama-3-8b", "h100", 1, None, "auto", "measured"),
        ("llama-3-8b", "h100", 1, FITTED, "auto", "calibrated"),
        ("llama-3-8b", "h100", 2, FITTED, "auto", "measured"),  # a calibration is one GPU's
        ("llama-3-8b", "h100", 1, FITTED, "measured", "measured"),
        ("llama-3-8b", "h100", 1, FITTED, "roofline", "roofline"),
        ("llama-3-8b", "h100", 1, FITTED, "calibrated", "calibrated"),
        ("llama-3-8b", "mi300x", 1, None, "auto", "roofline"),
        ("llama-3-8b", "l40s", 1, None, "roofline", "roofline"),
        ("deepseek-v3", "h200", 8, None, "auto", "measured"),
        ("deepseek-v3", "a100", 8, None, "auto", "roofline"),  # no fp8 GEMMs on the A100
    ],
)
def test_choose_follows_the_rule(model, gpu, tp, fitted, kind, source) -> None:  # type: ignore[no-untyped-def]
    cost = choose(resolve_model(model), resolve_gpu(gpu), tp, fitted, kind)
    assert cost.source == source
    assert cost.run_id == ("run-1" if source == "calibrated" else None)


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "fitted", "kind", "refused"),
    [
        ("llama-3-8b", "mi300x", 1, None, "measured", "no measured kernels for GPU 'mi300x'"),
        ("llama-3-8b", "h100", 2, FITTED, "calibrated", "times one GPU, not h100x2's 2"),
        ("llama-3-8b", "h100", 1, None, "calibrated", "no calibrated cost model"),
        ("llama-3-8b", None, 1, None, "auto", "the roofline needs a GPU spec"),
        ("llama-3-8b", "h100", 1, None, "cheapest", "unknown cost model"),
    ],
)
def test_choose_refuses_in_one_line(model, gpu, tp, fitted, kind, refused) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=refused) as caught:
        choose(resolve_model(model), gpu and resolve_gpu(gpu), tp, fitted, kind)
    assert "\n" not in str(caught.value)


def test_the_cpu_is_priced_by_its_calibration_only() -> None:
    shape = resolve_model("tiny-llama")
    assert chosen("auto", shape, None, 1, FITTED) == "calibrated"
    with pytest.raises(ValueError, match="no measured kernels for the CPU"):
        chosen("measured", shape, None, 1, FITTED)


def test_the_measured_step_is_fitted_once_per_model_and_gpu() -> None:
    shape, gpu = resolve_model("llama-3-8b"), resolve_gpu("h200")
    assert choose(shape, gpu, 1) is choose(shape, gpu, 1)
    assert choose(shape, gpu, 1) is not choose(shape, gpu, 2)


def test_a_custom_spec_under_a_catalog_name_is_not_measured() -> None:
    h100 = resolve_gpu("h100")
    faster = GpuSpec("h100", 2 * h100.peak_flops, h100.mem_bandwidth)
    assert choose(resolve_model("llama-3-8b"), faster, 1).source == "roofline"


# -- every stage by that rule ---------------------------------------------------------------


def test_savings_prices_a_request_with_the_measured_model_itself() -> None:
    """Savings prices each prefill alone: the measured model's own ``T(new, cached)``, not
    the fleet's step form fitted to it, so a miss and its hit keep their difference."""
    cost = cost_model("llama-3-8b", "h100", "auto", None)
    assert (cost.kind, cost.gpu, cost.run_id) == ("measured", "h100", None)
    inp = np.array([100.0, 4608.0, 20000.0])
    new = np.array([36.0, 512.0, 1.0])  # hits of 64, 4,096 and all but the last token
    want = measured_model(resolve_model("llama-3-8b"), "h100").prefill_seconds(new, inp - new)
    np.testing.assert_array_equal(cost.seconds(new, inp - new), want)
    assert (cost.seconds(new, inp - new) < cost.seconds(inp, np.zeros(3))).all()
    assert cost_model("deepseek-v3", "h200", "auto", None, tp=8).kind == "measured"
    with pytest.raises(ValueError, match="price with --cost-model roofline or auto"):
        cost_model("llama-3-8b", "l40s", "measured", None)


@pytest.mark.parametrize(
    "settings",
    [
        FleetSettings(cost_model="measured", gpu="l40s"),
        FleetSettings(cost_model="measured", deployments=("h100x1", "mi300x1")),
        SavingsSettings(cost_model="measured", gpu="mi300x"),
        plan_slo.PlanSloSettings(deployments=("l40sx1",), slo="ttft-p95=2", cost_model="measured"),
    ],
)
def test_measured_is_refused_before_the_warehouse_is_read(settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="no measured kernels .* — price with --cost-model"):
        settings.check()


@pytest.mark.parametrize(
    ("deployment", "source"),
    [("h100x1", "measured"), ("h200x8", "measured"), ("mi300x1", "roofline")],
)
def test_a_plan_prices_each_deployment_by_the_rule(deployment: str, source: str) -> None:
    settings = plan_slo.PlanSloSettings(deployments=(deployment,), slo="ttft-p95=2")
    cost = step_cost(settings, deployment, None)
    assert cost.source == source

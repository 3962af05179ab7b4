"""Savings: the per-request arithmetic, the choice of configuration and cost model."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from prefixscope.analysis.cost.savings import MissCost, cost_model, savings_rows
from prefixscope.cli import main
from prefixscope.stages.outcomes import calibrated
from tests.conftest import mooncake_line


def linear_cost(new: np.ndarray, cached: np.ndarray) -> np.ndarray:
    return np.asarray(new, dtype=float) + 0.001 * np.asarray(cached, dtype=float)


def test_savings_rows_by_hand() -> None:
    outcomes = pl.DataFrame(
        {
            "tenant": ["a", "a", "b"],
            "input_tokens": [100, 200, 50],
            "hit_tokens": [0, 150, 50],  # a miss, a partial hit, a full hit
        }
    )
    rows = savings_rows(outcomes, 1800.0, MissCost("roofline", "m", "g", linear_cost))
    fleet, a, b = rows
    assert [r["tenant"] for r in rows] == ["*", "a", "b"]
    # without: 100, 200, 50; with: 100, 50 + 0.15, 1 + 0.049 (a full hit computes one token)
    assert fleet["prefill_gpu_seconds_no_cache"] == pytest.approx(350)
    assert fleet["prefill_gpu_seconds_with_cache"] == pytest.approx(100 + 50.15 + 1.049)
    assert a["gpu_seconds_saved"] == pytest.approx(300 - 150.15)
    assert b["gpu_seconds_saved_per_hour"] == pytest.approx((50 - 1.049) * 2)
    assert fleet["ttft_p50_no_cache_s"] == pytest.approx(100)
    assert fleet["ttft_p50_with_cache_s"] == pytest.approx(50.15)
    assert a["ttft_p95_no_cache_s"] == pytest.approx(100 + 0.95 * 100)
    assert (a["requests"], a["input_tokens"], a["hit_tokens"]) == (2, 300, 150)


def test_choosing_a_configuration_and_a_cost_model(wh, write_lines, capsys) -> None:  # type: ignore[no-untyped-def]
    path, con = wh
    src = write_lines([mooncake_line(timestamp=i, hash_ids=[1, 2 + i % 2]) for i in range(6)])
    assert (
        main(["ingest", "--format", "mooncake", "--input", str(src), "--warehouse", str(path)]) == 0
    )
    assert main(["savings", "--warehouse", str(path)]) == 2
    assert "simulate --outcomes" in capsys.readouterr().err
    argv = ["simulate", "--warehouse", str(path), "--policy", "lru,fifo", "--capacity-blocks"]
    assert main([*argv, "2,3", "--outcomes"]) == 0
    assert main(["savings", "--warehouse", str(path)]) == 2
    assert "several configurations match" in capsys.readouterr().err  # two policies
    # of one policy's capacities, the largest the deployment's pool holds (h100x1: 885 blocks)
    assert main(["savings", "--warehouse", str(path), "--policy", "lru"]) == 0
    out = capsys.readouterr().out
    assert "lru shared @ 3 blocks" in out and "measured cost model" in out and "Decode time" in out
    assert "on h100x1 (885-block KV pool)" in out
    assert main(["savings", "--warehouse", str(path), "--policy", "lru", "--capacity-blocks",
                 "2"]) == 0  # fmt: skip
    assert "lru shared @ 2 blocks" in capsys.readouterr().out
    assert calibrated(con, "llama-3-8b", "h100") is None  # no replay run fitted one
    with pytest.raises(ValueError, match="no calibrated cost model"):
        cost_model("llama-3-8b", "h100", "calibrated", None)
    assert cost_model("llama-3-8b", "h100", "auto", None).kind == "measured"
    assert cost_model("llama-3-8b", "mi300x", "auto", None).kind == "roofline"
    assert cost_model("llama-3-8b", "h100", "roofline", None).kind == "roofline"
    with pytest.raises(ValueError, match="needs a GPU spec"):
        cost_model("tiny-llama", "cpu", "roofline")


def test_the_roofline_command_prints_the_worked_example(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["roofline", "--model", "llama-2-70b", "--cached", "4096", "--new", "64"]) == 0
    out = capsys.readouterr().out
    assert "68.98 B parameters" in out
    assert "32.76" in out  # miss / hit attention FLOPs


@pytest.mark.parametrize(
    ("kind", "calibrated", "shipped"),
    [("calibrated", True, False), ("shipped:h100-2026-11", True, True), ("roofline", False, False)],
)
def test_the_page_says_which_cost_models_rest_on_a_measurement(kind, calibrated, shipped) -> None:  # noqa: ANN001
    """A model shipped with prefixscope was measured on its GPU: the page says so, as it does
    for the warehouse's own calibration; only the roofline is not a measurement."""
    from prefixscope.dashboards.savings import _configuration

    row = {
        "tenant": "*", "policy": "lru", "isolation": "shared", "capacity_blocks": 885,
        "model": "llama-3-8b", "gpu": "h100", "deployment": "h100x1", "kv_pool_blocks": 885,
        "cost_model": kind, "cost_model_run_id": None, "cost_model_device": None,
        "holdout_median_abs_pct_err": None, "holdout_p90_abs_pct_err": None, "requests": 3,
        "hit_tokens": 1, "input_tokens": 2, "prefill_gpu_seconds_no_cache": 2.0,
        "prefill_gpu_seconds_with_cache": 1.0, "saved_share": 0.5,
        "gpu_seconds_saved_per_hour": 1.0, "ttft_p50_no_cache_s": 0.1,
        "ttft_p50_with_cache_s": 0.05, "ttft_p95_no_cache_s": 0.2, "ttft_p95_with_cache_s": 0.1,
    }  # fmt: skip
    shown = _configuration(0, [row])
    assert (shown["calibrated"], shown["shipped"]) == (calibrated, shipped)
    assert shown["gpu"] == "h100x1 (885-block KV pool)"

"""The error benchmark prices each real serving run with what its launch script set
(``benchmarks/data/served.csv``, ``benchmarks/data/moe_served.json``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from prefixscope.analysis.cost.measured import Fixed

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def me():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "measured_error", ROOT / "benchmarks" / "measured_error.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def runs(me):  # type: ignore[no-untyped-def]
    return {r.id: r for r in me.load_runs()[0]}


def test_every_served_row_matches_runs_and_a_kernel(me) -> None:
    """A row that names no run, or a kernel with no curve, would silently price nothing."""
    silicon = pl.read_csv(me.RUNS, infer_schema_length=10000)
    groups = {
        (p, s, v or "")
        for p, s, v in silicon.select("model_path", "system", "backend_version").iter_rows()
    }
    kernels = {c["kernel"] for c in json.loads(me.SERVED_MOE.read_text())["curves"]}
    served = me.served_settings()
    assert served
    for key, row in served.items():
        assert key in groups, key
        assert row["moe"] == "table" or row["moe"] in kernels, row
        assert row["kv_dtype"] in ("bf16", "fp8")
        assert row["budget"] == "2x-isl" or int(row["budget"]) > 0
        assert len(row["commit"]) == 40
        assert 0 < float(row["random_range_ratio"]) <= 1


@pytest.mark.parametrize(
    ("model", "system", "version", "isl", "moe", "kv", "budget"),
    [
        ("openai/gpt-oss-120b", "b200_sxm", "0.15.1", 1024, "mxfp8-activations", "fp8", 8192),
        ("openai/gpt-oss-120b", "h200_sxm", "0.18.0", 8192, "table", "bf16", 8192),
        ("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "0.17.0", 1024, "triton-ep", "bf16", 8192),
        ("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "0.19.0", 1024, "table", "fp8", 2048),
        ("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "0.19.0", 8192, "table", "fp8", 16384),
        ("Qwen/Qwen3-32B", "h100_sxm", "0.12.0", 1024, "table", "bf16", 8192),  # no script
    ],
)
def test_a_run_takes_its_scripts_settings(me, runs, model, system, version, isl, moe, kv, budget):  # type: ignore[no-untyped-def]
    silicon = pl.read_csv(me.RUNS, infer_schema_length=10000).filter(
        (pl.col("model_path") == model) & (pl.col("system") == system)
        & (pl.col("backend_version").fill_null("") == version) & (pl.col("isl") == isl)
        & (pl.col("moe_ep_size") == 1)
    )  # fmt: skip
    ids = [i for i in silicon["id"] if i in runs]
    assert ids
    scripted = model != "Qwen/Qwen3-32B"
    for i in ids:
        run = runs[i]
        assert (run.moe_kernel, run.kv_dtype, run.budget) == (moe, kv, budget), run
        assert bool(run.script) == scripted
        # the client draws lengths from [0.8 X, X]: a scripted run is priced at their mean
        assert run.isl == isl
        assert run.mean_isl == (round(isl * 0.9) if scripted else isl)


def test_the_served_kernel_replaces_the_moe_curve_only(me, runs) -> None:
    run = next(r for r in runs.values() if r.moe_kernel == "mxfp8-activations" and r.tp == 1)
    served, _ = me.model_for(run, Fixed(0.0, 0.0))
    table, _ = me.model_for(replace(run, moe_kernel="table"), Fixed(0.0, 0.0))
    curve = next(c for c in me.served_curves("mxfp8-activations") if c["moe_tp"] == 1)
    s = served.shape
    at = curve["tokens"][5]
    got = served.tables.moe(at, s.hidden_size, s.moe_intermediate_size, s.experts_per_token,
                            s.experts, 1, served.experts)  # fmt: skip
    assert float(got) == pytest.approx(curve["ms"][5], rel=1e-6)
    with pytest.raises(KeyError):
        served.tables.moe(at, 4096, 2048, 8, 64, 1, served.experts)
    # everything else is the GPU's own tables
    assert np.allclose(served.tables.gemm(512.0, 4096, 2880, "bf16"),
                       table.tables.gemm(512.0, 4096, 2880, "bf16"))  # fmt: skip
    # the MXFP8 experts prefill gpt-oss faster than the bf16-activation table: the fact the
    # runs show (benchmarks/RESULTS.md)
    assert served.prefill_seconds(8192, 0) < table.prefill_seconds(8192, 0)

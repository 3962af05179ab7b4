"""Replay and calibration on the CPU with a tiny Llama shape, end to end into the warehouse;
the GPU benchmark's smoke mode; the stratified sampler."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from prefixscope import warehouse
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Settings
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.stages import simulate
from tests.conftest import mooncake_line

torch = pytest.importorskip("torch")


@pytest.fixture
def simulated(wh, write_lines):  # type: ignore[no-untyped-def]
    """Two tenants whose requests share a system prompt of 1 to 3 blocks, simulated under lru
    with per-request outcomes."""
    path, con = wh
    for tenant, root in (("alpha", 100), ("beta", 200)):
        lines = [
            mooncake_line(
                timestamp=60 * i,
                input_length=512 * (1 + i % 3) + 300 + 100 * (i % 4),
                hash_ids=[root + j for j in range(1 + i % 3)] + [10_000 * root + i],
            )
            for i in range(12)
        ]
        with warehouse.recorded_run(con, "ingest", {}) as run_id:
            ingest_files(
                con, [write_lines(lines)], "mooncake", IngestOptions(tenant=tenant), run_id
            )
    con.close()
    settings = simulate.SimulateSettings(
        ("lru",), Capacities(blocks=[8]), measure=Settings(outcomes=True)
    )
    simulate.simulate_policies(path, settings)
    return path


@pytest.mark.slow
def test_replay_then_savings_end_to_end_on_cpu(simulated: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    wh = str(simulated)
    argv = ["replay", "--warehouse", wh, "--samples", "8", "--max-tokens", "256", "--repeats", "2"]
    assert main(argv) == 0
    assert "cost model: held-out median |error|" in capsys.readouterr().out
    con = warehouse.connect(simulated)
    samples = con.sql("SELECT * FROM replay_samples").pl()
    assert samples.height == 8
    assert (samples["input_tokens"] <= 256).all()
    assert (samples["new_tokens"] + samples["cached_tokens"] == samples["input_tokens"]).all()
    assert (samples["cached_tokens"] > 0).all()  # requests with a hit are preferred
    assert (samples["miss_seconds"] > 0).all() and (samples["hit_seconds"] > 0).all()
    assert set(samples["model"]) == {"tiny-llama"} and set(samples["gpu"]) == {"cpu"}
    assert samples["held_out"].sum() == 2
    # scaled requests keep their hit share (to a token)
    scaled = samples.filter(pl.col("request_input_tokens") > 256)
    share = scaled["cached_tokens"] / scaled["input_tokens"]
    trace_share = scaled["request_hit_tokens"] / scaled["request_input_tokens"]
    assert ((share - trace_share).abs() <= 1 / 256 + 1e-9).all()
    (model,) = con.sql("SELECT * FROM miss_cost_models").pl().to_dicts()
    assert model["model"] == "tiny-llama" and model["gpu"] == "cpu"
    assert (model["fit_points"], model["holdout_points"]) == (12, 4)
    assert model["holdout_median_abs_pct_err"] is not None
    assert min(model[c] for c in model if c.startswith("coef_")) >= 0
    con.close()

    # savings: the calibrated model where one exists for (model, gpu), else the measured one
    assert main(["savings", "--warehouse", wh, "--model", "tiny-llama", "--gpu", "cpu"]) == 0
    assert "calibrated cost model" in capsys.readouterr().out
    assert main(["savings", "--warehouse", wh]) == 0
    assert "llama-3-8b on h100x1 (" in capsys.readouterr().out
    con = warehouse.connect(simulated, read_only=True)
    kinds = con.execute(
        "SELECT cost_model, count(*) FROM savings GROUP BY ALL ORDER BY 1"
    ).fetchall()
    assert kinds == [("calibrated", 3), ("measured", 3)]  # fleet, alpha, beta each
    commands = [
        c for (c,) in con.execute("SELECT command FROM runs ORDER BY started_at").fetchall()
    ]
    assert commands[-3:] == ["replay", "savings", "savings"]
    con.close()


def test_the_bench_smoke_mode_runs_the_gpu_path_logic_on_cpu(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from prefixscope.gpu_replay import bench

    out = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--small", "--repeats", "2", "--out", str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert "miss TF/s" in printed and "held-out" in printed
    result = json.loads(out.read_text())
    assert len(result["results"]) == 6
    assert result["cost_model"]["holdout_samples"] >= 1
    assert all(r["miss_s"] > 0 and r["hit_s"] > 0 for r in result["results"])


def test_stratified_sampling_covers_every_stratum_first() -> None:
    from prefixscope.gpu_replay.replay import scale_to, stratified_sample

    outcomes = pl.DataFrame(
        {
            "request_id": [str(i) for i in range(40)],
            "tenant": ["t"] * 40,
            # 30 short requests with half hits, 10 long ones with full-ish hits
            "input_tokens": [100] * 30 + [5000] * 10,
            "hit_tokens": [40] * 30 + [4800] * 10,
        }
    )
    picks = stratified_sample(outcomes, 4, seed=1)
    assert sorted(picks["input_tokens"].to_list()) == [100, 100, 5000, 5000]
    assert scale_to(5000, 4800, 1000) == (1000, 960)
    assert scale_to(500, 100, 1000) == (500, 100)


@pytest.mark.slow
def test_the_flow_replay_stage_calibrates_what_its_savings_stage_then_uses(simulated) -> None:  # type: ignore[no-untyped-def]
    from prefixscope.analysis.simulation.scenarios import Scenario
    from prefixscope.pipelines import fleet_report as flow

    scenario = Scenario("lru", 8)
    calibrated = flow.replay.fn(str(simulated), scenario, 4)
    assert calibrated == ("tiny-llama", "cpu")
    model, gpu = calibrated
    settings = flow.savings_stage.SavingsSettings(
        model=model, gpu=gpu, policy="lru", capacity_blocks=8, isolation="shared"
    )
    text = flow.savings.fn(str(simulated), settings)
    assert "tiny-llama on cpu, calibrated cost model" in text


@pytest.mark.parametrize("command", ["replay", "bench"])
def test_a_roofline_gpu_is_resolved_where_it_is_parsed(tmp_path: Path, command: str) -> None:
    """``replay --gpu`` and the kernel bench's take the spec itself: a GPU file is read when
    the flag is parsed, and what runs below never reads it again."""
    from prefixscope.analysis.cost.gpus import GpuSpec
    from prefixscope.cli import build_parser
    from prefixscope.gpu_replay import bench
    from prefixscope.gpu_replay.timing import device_spec

    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\ntflops = 150\ntbps = 2.5\nhbm_gib = 64\n')
    if command == "bench":
        spec = bench.parse_args(["--device", "cpu", "--gpu", str(path)]).gpu
    else:
        spec = build_parser().parse_args(["replay", "--warehouse", "w", "--gpu", str(path)]).gpu
    assert isinstance(spec, GpuSpec)
    assert (spec.name, spec.peak_flops, spec.mem_bandwidth) == ("mine", 150e12, 2.5e12)
    path.unlink()  # nothing below reads the file again
    assert device_spec(torch.device("cpu"), torch.float32, spec) is spec

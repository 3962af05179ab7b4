"""`prefixscope calibrate` on files the GPU benchmark wrote on this CPU; the checks that refuse a
bad file; shipped cost models found when the warehouse has none; the pieces of the GPU check
(scaling by layers, the time guard, the merge of its parts) and the script itself on the CPU."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prefixscope.analysis.cost import calibration, costmodel, shipped
from prefixscope.analysis.cost.savings import cost_model
from prefixscope.analysis.fleet.stepcost import from_cost_model
from prefixscope.cli import main
from prefixscope.stages.outcomes import calibrated
from tests.conftest import mooncake_line

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The benchmark's smoke mode on this CPU: the whole model, and one of its two layers with
    the head alone, scaled by layers."""
    from prefixscope.gpu_replay import bench

    folder = tmp_path_factory.mktemp("bench")
    files = {"whole": folder / "whole.json", "layers": folder / "layers.json"}
    small = ["--device", "cpu", "--small", "--repeats", "2"]
    assert bench.main([*small, "--out", str(files["whole"])]) == 0
    assert bench.main([*small, "--layers", "1", "--out", str(files["layers"])]) == 0
    return files


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_bench_file_calibrates_the_warehouse_and_later_runs_find_it(
    wh, bench_files, capsys
) -> None:  # type: ignore[no-untyped-def]
    path, con = wh
    data = load(bench_files["whole"])
    assert main(["calibrate", "--from", str(bench_files["whole"]), "--warehouse", str(path)]) == 0
    assert "calibrated tiny-llama on cpu" in capsys.readouterr().out
    (row,) = con.sql("SELECT * FROM miss_cost_models").pl().to_dicts()
    cost = data["cost_model"]
    coefficients = [row[c] for c in ("coef_a", "coef_new", "coef_cached", "coef_new_cached")]
    assert coefficients + [row["coef_new_sq"]] == cost["coefficients"]
    assert [row["knee_linear_tokens"], row["knee_attention_tokens"]] == cost["knees"]
    assert row["holdout_median_abs_pct_err"] == cost["holdout_median_pct_err"]
    assert row["max_input_tokens"] == max(r["input_tokens"] for r in data["results"])
    ((command, status),) = con.execute(
        "SELECT command, status FROM runs WHERE run_id = ?", [row["run_id"]]
    ).fetchall()
    assert (command, status) == ("calibrate", "succeeded")
    found = calibrated(con, "tiny-llama", "cpu")
    assert found is not None and found[0] == row["run_id"]
    assert cost_model("tiny-llama", "cpu", "auto", found).kind == "calibrated"


def test_a_gpu_check_file_loads_every_part_and_a_cut_part_is_fitted_in_the_merge(
    wh, bench_files, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from prefixscope.gpu_replay import check

    cut = load(bench_files["layers"])
    for key in ("cost_model", "summary"):
        del cut[key]  # as a part ended by its time guard leaves it
    cut_file = tmp_path / "cut.json"
    cut_file.write_text(json.dumps(cut))
    status = [f"whole\t0\t1.5\t{bench_files['whole']}", f"cut\t124\t2.5\t{cut_file}"]
    merged = check.merge(status)
    assert merged["schema"] == costmodel.CHECK_SCHEMA and merged["seconds"] == 4.0
    assert [m["part"] for m in merged["models"]] == ["whole", "cut"]
    assert merged["parts"]["cut"]["bench"]["fitted_after_cut"] is True
    assert merged["parts"]["cut"]["exit"] == 124
    assert len(merged["models"][1]["shapes_fitted"]) == len(cut["results"])
    found = calibration.parse(merged, "check.json")
    assert [c.model for c in found] == ["tiny-llama", "tiny-llama"]
    assert found[0] == calibration.from_bench(load(bench_files["whole"]), "x")


def broken(mutate):  # type: ignore[no-untyped-def]
    def apply(data: dict) -> dict:
        data = copy.deepcopy(data)
        mutate(data)
        return data

    return apply


def _set(*keys_value):  # type: ignore[no-untyped-def]
    *keys, value = keys_value

    def mutate(d: dict) -> None:
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return broken(mutate)


def _on_gpu(name: str, coefficients: list[float]):  # type: ignore[no-untyped-def]
    def mutate(d: dict) -> None:
        d["gpu"]["name"] = name
        d["cost_model"]["coefficients"] = coefficients

    return broken(mutate)


def _on_h100(coefficients: list[float]):  # type: ignore[no-untyped-def]
    return _on_gpu("h100", coefficients)


BAD_FILES = [
    # (what is wrong, how the file is written, a fragment of the one-line error)
    ("missing", None, "no such file"),
    ("not JSON", "{not json", "is not JSON"),
    ("not a benchmark", {"results": []}, "schema None, expected"),
    ("an old schema", _set("schema", "prefixscope-bench/0"), "schema 'prefixscope-bench/0'"),
    ("no cost model", broken(lambda d: d.pop("cost_model")), "no 'cost_model'"),
    ("a NaN coefficient", _set("cost_model", "coefficients", 0, math.nan), "not a finite"),
    ("a negative coefficient", _set("cost_model", "coefficients", 2, -1e-9), "below 0"),
    ("four coefficients", _set("cost_model", "coefficients", [1.0] * 4), "expected 5 numbers"),
    ("a knee below 1", _set("cost_model", "knees", [0.5, 1.0]), "below 1"),
    ("another formula", _set("cost_model", "formula", "a + b*new"), "is not 'a + b"),
    ("an unknown model", _set("model", "name", "gpt-9"), "unknown model 'gpt-9'"),
    ("a GPU name with spaces", _set("gpu", "name", "my gpu"), "GPU name 'my gpu'"),
    # figures no fit gives, which later overflow a column or price a prefill at years
    ("a coefficient of 1e30", _set("cost_model", "coefficients", 0, 1e30), "above 1000"),
    ("a knee of 1e30", _set("cost_model", "knees", [1e30, 1.0]), "above 2.14748e+09"),
    ("2**70 fit samples", _set("cost_model", "fit_samples", 2**70), "not a whole number from"),
    ("2**40 input tokens", _set("cost_model", "max_input_tokens", 2**40), "from 1 to"),
    (
        "a held-out error of 1e300",
        _set("cost_model", "holdout_median_pct_err", 1e300),
        "above 1e+06",
    ),
    ("a device with escapes", _set("device", "\x1b[2Jgpu"), "the device is not a name"),
    ("JSON nested 100,000 deep", "[" * 100_000 + "]" * 100_000, "nested too deep"),
    # a catalog GPU's calibration that prices prefills faster than its datasheet peak
    ("zeros on an H100", _on_h100([0.0] * 5), "not a measurement"),
    ("1e-300 on an H100", _on_h100([1e-300] * 5), "not a measurement"),
    # a device the catalog does not know: the fastest catalog GPU's peak is its floor
    ("zeros on a CPU", _on_gpu("cpu", [0.0] * 5), "fastest catalog GPU"),
    ("1e-300 on a GPU of the user's", _on_gpu("mygpu", [1e-300] * 5), "fastest catalog GPU"),
]


@pytest.mark.parametrize(("what", "content", "fragment"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_refused_with_one_line_and_nothing_written(  # type: ignore[no-untyped-def]
    wh, bench_files, tmp_path: Path, capsys, what, content, fragment
) -> None:
    path, con = wh
    src = tmp_path / "bench.json"
    if isinstance(content, str):
        src.write_text(content)
    elif isinstance(content, dict):
        src.write_text(json.dumps(content))
    elif content is not None:
        src.write_text(json.dumps(content(load(bench_files["whole"]))))
    assert main(["calibrate", "--from", str(src), "--warehouse", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prefixscope calibrate: error: ")
    assert fragment in err and " — " in err, err
    assert con.execute("SELECT count(*) FROM miss_cost_models").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM runs WHERE command = 'calibrate'").fetchall() == [(0,)]


def test_gpu_overrides_the_name_the_file_gives(wh, bench_files, capsys) -> None:  # type: ignore[no-untyped-def]
    path, con = wh
    argv = ["calibrate", "--from", str(bench_files["whole"]), "--warehouse", str(path)]
    assert main([*argv, "--gpu", "L40S"]) == 0
    assert con.sql("SELECT gpu FROM miss_cost_models").fetchall() == [("l40s",)]
    assert main([*argv, "--gpu", "no/slash"]) == 2
    assert "GPU name 'no/slash'" in capsys.readouterr().err


@pytest.fixture
def shipped_dir(tmp_path: Path, monkeypatch, bench_files) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / "cost_models"
    folder.mkdir()
    (folder / "cpu-test.json").write_text(bench_files["whole"].read_text())
    monkeypatch.setattr(shipped, "DIRECTORY", folder)
    return folder


def test_a_shipped_model_prices_what_the_warehouse_has_no_model_for(
    wh, shipped_dir, bench_files
) -> None:  # type: ignore[no-untyped-def]
    path, con = wh
    assert shipped.find("tiny-llama", "h200") is None  # shipped for the CPU only
    found = calibrated(con, "tiny-llama", "cpu")
    coefficients = tuple(load(bench_files["whole"])["cost_model"]["coefficients"])
    assert found is not None and found[:2] == ("shipped:cpu-test", coefficients)
    cost = cost_model("tiny-llama", "cpu", "auto", found)
    assert (cost.kind, cost.run_id) == ("shipped:cpu-test", None)
    step = from_cost_model(costmodel.CostModel(found[1], found[2]), found[0])
    assert (step.source, step.run_id) == ("shipped:cpu-test", None)
    # once the warehouse holds its own, that one wins
    assert main(["calibrate", "--from", str(bench_files["layers"]), "--warehouse", str(path)]) == 0
    own = calibrated(con, "tiny-llama", "cpu")
    assert own is not None and not own[0].startswith("shipped:")


def test_savings_rows_say_which_shipped_model_priced_them(
    wh, write_lines, shipped_dir, capsys
) -> None:  # type: ignore[no-untyped-def]
    path, con = wh
    src = write_lines([mooncake_line(timestamp=i, hash_ids=[1, 2 + i % 2]) for i in range(6)])
    argv = ["--warehouse", str(path)]
    assert main(["ingest", "--format", "mooncake", "--input", str(src), *argv]) == 0
    assert main(["simulate", *argv, "--policy", "lru", "--capacity-blocks", "3", "--outcomes"]) == 0
    assert main(["savings", *argv, "--model", "tiny-llama", "--gpu", "cpu"]) == 0
    capsys.readouterr()
    rows = con.sql("SELECT DISTINCT cost_model, cost_model_run_id FROM savings").fetchall()
    assert rows == [("shipped:cpu-test", None)]


def test_every_shipped_file_is_a_measurement_on_a_gpu() -> None:
    """Nothing is shipped that no GPU measured: each file parses and says where it was run."""
    for path in sorted(shipped.DIRECTORY.glob("*.json")):
        found = calibration.read(path)
        data = load(path)
        parts = [p["bench"] for p in data["parts"].values()] if "parts" in data else [data]
        assert found and all(p["provenance"]["device_type"] == "cuda" for p in parts if p)
        assert all(p["provenance"]["driver"] for p in parts if p)


SCALING = [
    # (T_N, T_0, N, L, whole-model T)
    (3.0, 1.0, 8, 80, 21.0),
    (1.0, 1.0, 8, 80, 1.0),  # nothing but the head
    (0.9, 1.0, 8, 80, 1.0),  # noise: a layer never costs less than nothing
    (5.0, 0.0, 1, 2, 10.0),
]


@pytest.mark.parametrize(("t_n", "t_0", "n", "total", "expected"), SCALING)
def test_scaling_by_layers_multiplies_only_what_grows_with_depth(
    t_n, t_0, n, total, expected
) -> None:  # type: ignore[no-untyped-def]
    from prefixscope.gpu_replay.depth import scale

    assert scale(t_n, t_0, n, total) == pytest.approx(expected)


def test_a_file_scaled_by_layers_reports_the_whole_model(bench_files) -> None:  # type: ignore[no-untyped-def]
    data = load(bench_files["layers"])
    assert data["measured_layers"] == 1 and data["model"]["num_hidden_layers"] == 2
    layers, head = data["measured"]["layers"], data["measured"]["head"]
    for r, n, h in zip(data["results"], layers, head, strict=True):
        assert r["miss_s"] == pytest.approx(h["miss_s"] + 2 * max(n["miss_s"] - h["miss_s"], 0))
        assert r["miss_flops"] > n["miss_flops"] > h["miss_flops"] > 0  # whole > 1 layer > head


BUDGETS = [
    # (limit, elapsed, slowdown of the last shape, roofline s of the next, allowed)
    (None, 1e6, 10.0, 1e6, True),
    (100.0, 50.0, 2.0, 20.0, True),
    (100.0, 50.0, 2.0, 30.0, False),
    (100.0, 50.0, 0.0, 12.0, True),  # nothing measured yet: the initial slowdown, 4
    (100.0, 50.0, 0.0, 13.0, False),
]


@pytest.mark.parametrize(("limit", "elapsed", "slowdown", "roofline", "allowed"), BUDGETS)
def test_the_time_guard_skips_a_shape_predicted_to_end_past_the_limit(  # type: ignore[no-untyped-def]
    limit, elapsed, slowdown, roofline, allowed
) -> None:
    from prefixscope.gpu_replay.budget import Budget

    budget = Budget(limit, started=time.perf_counter() - elapsed, slowdown=slowdown)
    assert budget.allows(roofline) is allowed


@pytest.mark.slow  # two benchmark processes and the merge
def test_the_gpu_check_script_runs_on_the_cpu(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    script = ROOT / "benchmarks" / "gpu_check.sh"
    done = subprocess.run(
        ["bash", str(script), "--device", "cpu", "--small", "--repeats", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    merged = load(tmp_path / "gpu_check.json")
    assert [p["exit"] for p in merged["parts"].values()] == [0, 0, 0]
    kinds = merged["tables"]["summary"]  # the tables' part, on the H200's tables
    assert set(kinds) == {"gemm_bf16", "context", "generation", "chunk"}
    assert all(k["points"] >= 2 and k["ratio_min"] <= k["ratio_max"] for k in kinds.values())
    assert [m["measured_layers"] for m in merged["models"]] == [None, 1]
    for m in merged["models"]:
        assert m["complete"] and len(m["shapes_fitted"]) == 6 and not m["shapes_skipped"]
        assert m["holdout_median_pct_err"] >= 0 and m["miss_tflops"]["median"] > 0
    assert merged["provenance"]["torch"] == torch.__version__
    assert len(calibration.parse(merged, "gpu_check.json")) == 2

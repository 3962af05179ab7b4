"""Bad hardware and model input, for every command that takes it (``fleet``, ``plan``,
``savings``, ``deployment``, ``fleet-report``): a deployment whose weights do not fit, an
unknown GPU or model, a malformed config.json, a TP that does not shard the model's heads, a
negative or NaN price. Each is one line naming what is wrong and what to do (after `` — ``),
exit 2, and nothing written: the warehouse byte for byte as it was, no run recorded, and no
new file beside it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from prefixscope.analysis.cost.deployment import memory_split, parse_deployment
from prefixscope.analysis.cost.gpufile import read_gpu_file
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.prices import load_prices
from prefixscope.cli import main
from prefixscope.pipelines import parameters
from prefixscope.pipelines.flow_parameters import FlowParameters
from tests.conftest import LLAMA_8B_CONFIG, mooncake_line

#: What ``--model-config`` reads: a Llama-3-8B-like config.json under another name.
CONFIG = LLAMA_8B_CONFIG
GPU_FILE = 'name = "mygpu"\ntflops = 400\ntbps = 2.0\nhbm_gib = 80\nprice_hour = {price}\n'


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The bad files every case names, by what is wrong with each."""
    folder = tmp_path_factory.mktemp("bad")
    texts = {
        "config-not-json.json": '{"num_hidden_layers": 32,',
        "config-zero-layers.json": json.dumps({**CONFIG, "num_hidden_layers": 0}),
        "config-text-heads.json": json.dumps({**CONFIG, "num_attention_heads": "32"}),
        "gpu-negative-price.toml": GPU_FILE.format(price=-1),
        "gpu-nan-price.toml": GPU_FILE.format(price="nan"),
        "gpu-tiny-hbm.toml": GPU_FILE.format(price=1).replace("hbm_gib = 80", "hbm_gib = 1"),
        "prices-negative.toml": "gpu_hour = -2.5\n",
        "prices-nan.toml": "dram_gb_hour = nan\n",
    }
    for name, text in texts.items():
        (folder / name).write_text(text)
    return {name.rsplit(".", 1)[0]: str(folder / name) for name in texts}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Thirty short conversations of 512-token blocks, simulated under LRU at 4 and 8 blocks
    with per-request outcomes: every command has what it reads."""
    folder = tmp_path_factory.mktemp("wh")
    lines = []
    for s in range(30):
        chain = [1]
        for turn in range(2):
            chain = chain + [s * 100 + turn * 10 + k for k in range(2)]
            lines.append(mooncake_line((s * 5 + turn * 40) * 1000, len(chain) * 512, 8, chain))
    log = folder / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    wh = folder / "wh.duckdb"
    argv = ["--warehouse", str(wh)]
    assert main(["ingest", "--format", "mooncake", "--input", str(log), *argv]) == 0
    assert main(["simulate", *argv, "--policy", "lru,ceiling", "--capacity-blocks", "4,8",
                 "--window", "all", "--outcomes"]) == 0  # fmt: skip
    return wh


def fleet(wh: str, *flags: str) -> list[str]:
    return ["fleet", "--warehouse", wh, "--replicas", "1", "--router", "round-robin", *flags]


def plan(wh: str, *flags: str) -> list[str]:
    return ["plan", "--warehouse", wh, *flags]


def savings(wh: str, *flags: str) -> list[str]:
    return ["savings", "--warehouse", wh, "--policy", "lru", *flags]


def deployment(wh: str, *flags: str) -> list[str]:
    return ["deployment", *flags]


def flow(wh: str, *flags: str) -> list[str]:
    out = str(Path(wh).with_name("report.html"))
    log = str(Path(wh).with_name("log.jsonl"))
    return ["fleet-report", "--input", log, "--warehouse", wh, "--out", out, *flags]


Argv = Callable[..., list[str]]
FITS = "use h100x2 or more GPUs per replica"
# (command, its flags, with {name} for a bad file, and the words the line must hold)
CASES: list[tuple[Argv, list[str], str]] = [
    # a deployment whose weights do not fit: named with the smallest TP that does
    (fleet, ["--deployment", "h100", "--model", "llama-3.3-70b"], FITS),
    (savings, ["--deployment", "h100", "--model", "llama-3.3-70b"], FITS),
    (deployment, ["--deployment", "h100", "--model", "llama-3.3-70b"], FITS),
    (fleet, ["--deployment", "{gpu-tiny-hbm}x1"], "use a larger GPU"),
    (flow, ["--savings-gpu", "{gpu-tiny-hbm}"], "no TP of mygpu holds deepseek-v3"),
    # an unknown GPU
    (fleet, ["--deployment", "b300x8"], "unknown GPU 'b300'"),
    (fleet, ["--capacity-blocks", "4", "--gpu", "b300"], "unknown GPU 'b300'"),
    (plan, ["--gpu", "b300"], "unknown GPU 'b300'"),
    (savings, ["--deployment", "b300"], "unknown GPU 'b300'"),
    (savings, ["--gpu", "b300"], "unknown GPU 'b300'"),
    (deployment, ["--deployment", "b300x2"], "unknown GPU 'b300'"),
    (flow, ["--savings-gpu", "b300"], "unknown GPU 'b300'"),
    # an unknown engine: named, before any capacity is asked for
    (fleet, ["--engine", "vlm"], "unknown engine 'vlm'; known: ideal, vllm, sglang"),
    # an unknown model
    (fleet, ["--deployment", "h100", "--model", "llama-9"], "unknown model 'llama-9'"),
    (plan, ["--model", "llama-9"], "unknown model 'llama-9'"),
    (savings, ["--model", "llama-9"], "unknown model 'llama-9'"),
    (deployment, ["--deployment", "h100", "--model", "llama-9"], "unknown model 'llama-9'"),
    (flow, ["--savings-model", "llama-9"], "unknown model 'llama-9'"),
    # a malformed config.json: not JSON, a key out of bounds, a key of the wrong type
    (fleet, ["--deployment", "h100", "--model-config", "{config-not-json}"], "not JSON"),
    (plan, ["--model-config", "{config-zero-layers}"], "num_hidden_layers"),
    (savings, ["--model-config", "{config-text-heads}"], "num_attention_heads"),
    (deployment, ["--deployment", "h100", "--model-config", "{config-not-json}"], "not JSON"),
    (flow, ["--savings-model-config", "{config-zero-layers}"], "num_hidden_layers"),
    # a TP that does not shard the heads: vLLM divides the attention heads evenly
    (fleet, ["--deployment", "h100x3"], "TP 3 does not divide llama-3-8b's 32 attention heads"),
    (savings, ["--deployment", "h100x5"], "TP 5 does not divide llama-3-8b's 32"),
    (deployment, ["--deployment", "h200x6", "--model", "deepseek-v3"], "TP 6 does not divide"),
    # ... and a GQA model's KV heads are split or replicated whole
    (
        deployment,
        ["--deployment", "h100x14", "--model", "qwen2.5-7b"],
        "TP 14 neither divides nor is a multiple of qwen2.5-7b's 4 KV heads",
    ),  # fmt: skip
    # a negative or NaN price: a GPU file's, or a prices file's
    (fleet, ["--deployment", "{gpu-negative-price}x1"], "'price_hour'"),
    (fleet, ["--capacity-blocks", "4", "--gpu", "{gpu-nan-price}"], "'price_hour'"),
    (plan, ["--gpu", "{gpu-nan-price}"], "'price_hour'"),
    (plan, ["--prices", "{prices-negative}"], "gpu_hour"),
    (plan, ["--prices", "{prices-nan}"], "dram_gb_hour"),
    (savings, ["--deployment", "{gpu-negative-price}x1"], "'price_hour'"),
    (deployment, ["--deployment", "{gpu-nan-price}"], "'price_hour'"),
    (flow, ["--savings-gpu", "{gpu-negative-price}"], "'price_hour'"),
    # a capacity the deployment cannot hold is never priced as it
    (savings, ["--capacity-blocks", "100000000"], "more KV than h100x1's pool"),
    (savings, ["--deployment", "h100x2", "--cost-model", "calibrated"], "times one GPU"),
]


def _state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.mark.parametrize(
    ("argv", "flags", "says"),
    CASES,
    ids=[f"{a.__name__}-{'-'.join(f)[:40]}" for a, f, _ in CASES],
)
def test_bad_hardware_input_is_one_line_and_writes_nothing(
    warehouse: Path, files: dict[str, str], capsys, argv: Argv, flags: list[str], says: str
) -> None:  # noqa: ANN001
    before = _state(warehouse.parent)
    given = [f.format(**files) if "{" in f else f for f in flags]
    assert main(argv(str(warehouse), *given)) == 2
    out, err = capsys.readouterr()
    name = argv(str(warehouse))[0]
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"prefixscope {name}: error: ") and " — " in err, err
    assert says in err, err
    assert "Traceback" not in err
    assert _state(warehouse.parent) == before  # nothing written, nothing created


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"savings_model": "llama-9"}, "unknown model"),
        ({"savings_gpu": "b300"}, "unknown GPU"),
        ({"savings_capacity_blocks": 10**8}, "more KV than h200x8's pool"),
    ],
)
def test_the_flows_parameters_are_refused_before_any_work(
    warehouse: Path, flags: dict, says: str
) -> None:  # noqa: ANN001
    """A scheduled run's parameters come from a deployment, not the command line: the flow's
    own check refuses them in the same words."""
    with pytest.raises(ValueError, match=says):
        parameters.check(FlowParameters(inputs=(str(warehouse.with_name("log.jsonl")),), **flags))


def test_the_flows_savings_capacity_is_the_pool_it_prices() -> None:
    """The flow simulates its savings policy at the KV pool of the fewest GPUs that hold its
    model (by default DeepSeek-V3 on H200s: ``pipelines/served.py``), beside the grid, and
    prices that scenario."""
    checked = parameters.check(
        FlowParameters(inputs=(__file__,), capacities_blocks=(4_000, 64_000), policies=("lru",)),
        serving=True,
    )
    pool = memory_split(resolve_model("deepseek-v3"), parse_deployment("h200x8"), block_size=512)
    assert checked.deployment is not None and checked.deployment.name == "h200x8"
    assert checked.simulated_blocks == (pool.kv_pool_blocks, 4_000, 64_000)
    assert checked.capacities_blocks == (4_000, 64_000)  # the grid given, for the curve
    assert (checked.priced.policy, checked.priced.capacity_blocks) == ("lru", pool.kv_pool_blocks)
    seventy = parameters.check(
        FlowParameters(inputs=(__file__,), savings_model="llama-3.3-70b", savings_gpu="h100"),
        serving=True,
    )
    # the fewest H100s that hold 70B's weights
    assert seventy.deployment is not None and seventy.deployment.name == "h100x2"


def test_the_flows_savings_model_may_be_a_config(tmp_path: Path) -> None:
    """``--savings-model-config``: the flow sizes its deployment and pool by that shape (here
    Llama-3-8B's with twice the KV heads: half the pool)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**CONFIG, "num_key_value_heads": 16}))
    checked = parameters.check(
        FlowParameters(inputs=(__file__,), savings_model="mine",
                       savings_model_config=str(config), savings_gpu="h100"),
        serving=True,
    )  # fmt: skip
    shape = resolve_model("mine", str(config))
    pool = memory_split(shape, parse_deployment("h100x1"), block_size=512).kv_pool_blocks
    eight = memory_split(resolve_model("llama-3-8b"), parse_deployment("h100x1"), block_size=512)
    assert checked.deployment is not None and checked.deployment.name == "h100x1"
    assert pool in checked.simulated_blocks
    assert checked.priced.capacity_blocks == pool and pool < eight.kv_pool_blocks


@pytest.mark.parametrize(
    ("read", "limit"),
    [
        (lambda p: resolve_model(None, p), "16 MiB"),
        (read_gpu_file, "64 KiB"),
        (load_prices, "64 KiB"),
    ],
    ids=["config.json", "gpu.toml", "prices.toml"],
)
def test_every_flag_file_is_read_with_one_bound_and_the_same_words(
    tmp_path: Path, read, limit
) -> None:  # noqa: ANN001
    """``prefixscope/textfile.py``: a missing file, a folder, a FIFO (which would block the
    read forever), bytes that are not UTF-8, and a file past the reader's bound are each one
    line, before any parsing."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b" " * (16 * 2**20 + 1))
    bad = tmp_path / "bad"
    bad.write_bytes(b"\xff\xfe name")
    for path, says in [
        (tmp_path / "missing", "cannot read"),
        (tmp_path, "cannot read|is not a regular file"),
        (fifo, "is not a regular file"),
        (bad, "is not UTF-8 text"),
        (big, f"is larger than {limit}"),
    ]:
        with pytest.raises(ValueError, match=says) as caught:
            read(str(path))
        assert str(caught.value).count("\n") == 0 and " — " in str(caught.value)

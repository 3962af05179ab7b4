"""Hostile values for every flag that takes a number, a list, a name, a file of settings or an
address: each stops the command with one line on stderr, exit 2, naming the flag or the key,
and nothing written (docs/operations.md). A value given twice in a list is refused: it would
run, and write, every row of it twice."""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.cost.gpus import MAX_TBPS, MAX_TFLOPS, MIN_TFLOPS, resolve_gpu
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.prices import load_prices
from prefixscope.cli import flags, main

FLEET = ["fleet", "--replicas", "2", "--router", "random", "--capacity-blocks", "5"]
PLAN = ["plan"]
SIM = ["simulate", "--policy", "lru", "--capacity-blocks", "5"]
REPORT = ["fleet-report", "--input", "{good}"]


def one_line(capsys: pytest.CaptureFixture[str], status: int) -> str:
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("prefixscope"), err
    assert " — " in lines[0], err
    return lines[0]


def run(tmp_path: Path, argv: list[str]) -> tuple[int, Path]:
    """``main(argv)`` with a warehouse (and a report) under ``tmp_path``; ``{good}`` is a
    readable log and ``{tmp}`` the folder."""
    good = tmp_path / "good.jsonl"
    good.write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}\n')
    wh = tmp_path / "wh.duckdb"
    argv = [a.replace("{good}", str(good)).replace("{tmp}", str(tmp_path)) for a in argv]
    extra = ["--warehouse", str(wh)]
    if argv[0] == "fleet-report":
        extra += ["--out", str(tmp_path / "r.html")]
    if argv[0] == "roofline":
        extra = []
    return main([*argv, *extra]), wh


# (argv, what the line must name)
NUMBERS = [
    # duplicates, spelled alike or not
    ([*FLEET[:1], "--replicas", "2,2", *FLEET[3:]], "--replicas"),
    ([*FLEET[:1], "--replicas", "2,02", *FLEET[3:]], "given twice"),
    ([*FLEET[:1], "--replicas", "2,+2", *FLEET[3:]], "given twice"),
    ([*FLEET[:3], "--router", "random,RANDOM", *FLEET[5:]], "--router"),
    ([*FLEET[:5], "--capacity-blocks", "5,5"], "--capacity-blocks"),
    ([*FLEET[:5], "--capacity-gib", "1,1.0"], "--capacity-gib"),
    ([*FLEET, "--load-scale", "1,1e0"], "--load-scale"),
    ([*FLEET, "--window", "all,all"], "--window"),
    ([*FLEET, "--tier", "dram:1,dram:1.0"], "--tier"),
    ([*FLEET, "--tier", "none,none"], "--tier"),
    ([*FLEET, "--shared-store", "inf,INF"], "--shared-store"),
    ([*SIM, "--policy", "lru,lru"], "--policy"),
    ([*SIM, "--isolation", "shared,SHARED"], "--isolation"),
    ([*SIM, "--block-size", "16,016"], "--block-size"),
    (["simulate", "--policy", "lru", "--capacity-tokens", "1_000,1000"], "--capacity-tokens"),
    # integers that are not integers
    ([*FLEET[:1], "--replicas", "0x10", *FLEET[3:]], "--replicas"),
    ([*FLEET[:1], "--replicas", "-0", *FLEET[3:]], "--replicas"),
    ([*FLEET[:1], "--replicas", "", *FLEET[3:]], "--replicas"),
    ([*FLEET[:1], "--replicas", ",", *FLEET[3:]], "--replicas"),
    ([*FLEET[:1], "--replicas", "\uff12", *FLEET[3:]], "--replicas"),  # a full-width 2
    ([*FLEET[:1], "--replicas", "1__0", *FLEET[3:]], "--replicas"),
    ([*FLEET[:1], "--replicas", "1e3", *FLEET[3:]], "--replicas"),
    ([*SIM, "--block-size", "2000000"], "--block-size"),
    # numbers that are not sizes
    ([*FLEET, "--load-scale", "nan"], "--load-scale"),
    ([*FLEET, "--load-scale", "inf"], "--load-scale"),
    ([*FLEET, "--load-scale", "1e308"], "--load-scale"),
    ([*FLEET, "--load-scale", "-0"], "--load-scale"),
    ([*FLEET, "--load-scale", "0x10"], "--load-scale"),
    ([*FLEET[:5], "--capacity-gib", "-inf"], "--capacity-gib"),
    ([*FLEET, "--tier", "dram:1e30"], "--tier"),
    ([*FLEET, "--tier", "dram:nan"], "--tier"),
    ([*FLEET, "--tier", "dram:inf"], "--tier"),
    ([*FLEET, "--tier", "dram:-0"], "--tier"),
    ([*FLEET, "--tier", "dram:1:0"], "--tier"),
    ([*FLEET, "--tier", "dram:1:1e30"], "--tier"),
    ([*FLEET, "--tier", "dram:1:2:3"], "--tier"),
    ([*FLEET, "--tier", "dram:"], "--tier"),
    ([*FLEET, "--shared-store", "1e30"], "--shared-store"),
    ([*FLEET, "--shared-store", "nan"], "--shared-store"),
    ([*FLEET, "--shared-store", "-inf"], "--shared-store"),
    ([*FLEET, "--shared-store", "inf:inf"], "--shared-store"),
    ([*FLEET, "--shared-store", ""], "--shared-store"),
    (["plan", "--load-scale", "nan"], "--load-scale"),
    (["plan", "--load-scale", "1e308"], "--load-scale"),
]

GPUS = [
    "x:nan:1",
    "x:inf:1",
    "x:-inf:1",
    "x:1e-300:1",
    "x:1e308:1",
    "x:1:1e-300",
    "x:1:1e308",
    "x:0x10:1",
    "x:-0:1",
    "x:1_000_000:1",
    "x::1",
    ":1:1",
    "x:1:1:1",
    "x:1",
    "x\n:1:1",
    "tpu",
    "",
]
GPU_COMMANDS = [
    [*FLEET, "--gpu"],
    ["plan", "--gpu"],
    ["roofline", "--cached", "1", "--new", "1", "--gpu"],
    ["savings", "--gpu"],
    ["replay", "--gpu"],
    [*REPORT, "--savings-gpu"],
]

ADDRESSES = [
    "nowhere",
    "tcp://",
    "tcp://127.0.0.1",
    "tcp://127.0.0.1:0",
    "tcp://127.0.0.1:65536",
    "http://127.0.0.1:80",
    "tcp://127.0.0.1:80/path",
    "tcp://-x:80",
    "",
]


@pytest.mark.parametrize(("argv", "needle"), NUMBERS)
def test_a_number_that_is_not_a_size_or_a_value_given_twice_is_one_line(
    tmp_path, capsys, argv, needle
) -> None:
    status, wh = run(tmp_path, argv)
    assert needle in one_line(capsys, status)
    assert not wh.exists()


@pytest.mark.parametrize("spec", GPUS)
@pytest.mark.parametrize("command", GPU_COMMANDS, ids=lambda c: c[0])
def test_a_gpu_spec_out_of_bounds_is_one_line_for_every_command(
    tmp_path, capsys, command, spec
) -> None:
    status, wh = run(tmp_path, [*command, spec])
    line = one_line(capsys, status)
    assert command[-1] in line
    assert not wh.exists()


@pytest.mark.parametrize("address", ADDRESSES)
@pytest.mark.parametrize("command", [[*FLEET], [*REPORT]], ids=lambda c: c[0])
def test_a_malformed_dask_address_is_one_line_when_parsed(
    tmp_path, capsys, command, address
) -> None:
    status, wh = run(tmp_path, [*command, "--dask-address", address])
    assert "--dask-address" in one_line(capsys, status)
    assert not wh.exists()


def unused_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_dask_scheduler_is_one_line_after_the_stated_timeout(
    tmp_path, capsys, monkeypatch
) -> None:
    from prefixscope.analysis import fanout

    monkeypatch.setattr(fanout, "CONNECT_TIMEOUT_S", 1.0)
    address = f"tcp://127.0.0.1:{unused_loopback_port()}"
    status, wh = run(tmp_path, [*FLEET, "--dask-address", address])
    line = one_line(capsys, status)
    assert address in line and "within 1 s" in line
    assert not wh.exists()
    assert address not in fanout._CLIENTS  # no half-made client left to collect


# --- tenant names ---------------------------------------------------------------------------

TENANTS = [
    (["--synthetic-tenants", "chat,*"], "--synthetic-tenants"),
    (["--synthetic-tenants", "chat,chat"], "--synthetic-tenants"),
    (["--synthetic-tenants", "chat,"], "--synthetic-tenants"),
    (["--synthetic-tenants", ""], "--synthetic-tenants"),
    (["--synthetic-tenants", "chat,\x1b[2J"], "--synthetic-tenants"),
    (["--synthetic-tenants", "x" * 300], "--synthetic-tenants"),
    (["--tenant", "*"], "--tenant"),
    (["--tenant", " "], "--tenant"),
    (["--tenant", "a\nb"], "--tenant"),
    (["--tenant", "kimi", "--synthetic-tenants", "chat,kimi"], "the --tenant of the logs"),
]


@pytest.mark.parametrize(("extra", "needle"), TENANTS)
def test_a_bad_tenant_name_stops_fleet_report_before_the_warehouse_is_touched(
    tmp_path, capsys, extra, needle
) -> None:
    status, wh = run(tmp_path, [*REPORT, *extra])
    assert needle in one_line(capsys, status)
    assert not wh.exists()
    assert not list(tmp_path.glob("*.synthetic-*"))  # no synthetic log written either


# --- the flow's parameters, before the flow starts ------------------------------------------

PARAMETERS = [
    (["--fleet-replicas", "4,4"], "--fleet-replicas"),
    (["--fleet-replicas", "99"], "1 to 64"),
    (["--capacity-blocks", "1000,1_000"], "--capacity-blocks"),
    (["--policy", "lru,LRU"], "--policy"),
    (["--policy", "nope"], "unknown policy"),
    (["--isolation", "shared,shared"], "--isolation"),
    (["--isolation", "walled"], "unknown isolation"),
    (["--window", "all,never"], "unknown window"),
    (["--savings-model", "gpt"], "unknown model"),
    (["--workers", "-1"], "--workers"),
    (["--replay-samples", "1e3"], "--replay-samples"),
    (["--input", "{tmp}/missing.jsonl"], "missing.jsonl"),
    (["--input", "{tmp}/*.nothing"], "no input file matches"),
    (["--input", "{tmp}"], "is a directory"),
    (["--policy", "ceiling,lru", "--savings-policy", "s3fifo"], "--savings-policy 's3fifo'"),
    (["--savings-policy", "ceiling"], "not a bounded policy"),
    (["--savings-capacity-blocks", "0"], "--savings-capacity-blocks"),
    (["--plan-target", "1.5"], "--plan-target"),
    (["--slo", "ttft-p95"], "ttft-p95"),
    (["--slo", ""], "at least one target"),
    (["--agent-input", "{tmp}/missing"], "missing"),
    (["--agent-input", "{tmp}/*.tar.gz"], "no input file matches"),
    (["--agent-input", "{tmp}", "--agent-tenant", "default"], "--agent-tenant 'default'"),
    (["--agent-input", "{tmp}", "--agent-arrival", "soon"], "--agent-arrival"),
]


@pytest.mark.parametrize(("extra", "needle"), PARAMETERS)
def test_fleet_report_checks_every_parameter_before_the_flow_starts(
    tmp_path, capsys, monkeypatch, extra, needle
) -> None:
    from prefixscope.pipelines import fleet_report

    def never(*_: object, **__: object) -> None:
        raise AssertionError("the flow started")

    monkeypatch.setattr(fleet_report, "fleet_report", never)
    status, wh = run(tmp_path, [*REPORT, *extra])
    assert needle in one_line(capsys, status)
    assert not wh.exists()


def test_schedule_refuses_a_dask_address_in_one_line(tmp_path, capsys) -> None:
    argv = ["schedule", "--cron", "0 * * * *", *REPORT[1:], "--dask-address", "tcp://127.0.0.1:1"]
    status, wh = run(tmp_path, argv)
    assert "--dask-address" in one_line(capsys, status)
    assert not wh.exists()


@pytest.mark.parametrize("cron", ["nope", "* * *", "61 * * * *", ""])
def test_a_cron_expression_is_checked(cron: str) -> None:
    from prefixscope.pipelines.deployments import check_cron

    with pytest.raises(ValueError, match="--cron"):
        check_cron(cron)
    check_cron("0 * * * *")


# --- --model-config, key by key -------------------------------------------------------------

LLAMA = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32}
CONFIGS = [
    ("[1, 2]", "the file"),
    ("a = 1\n", "not JSON"),
    ("", "not JSON"),
    ("null", "the file"),
    (json.dumps({**LLAMA, "num_hidden_layers": 0}), "num_hidden_layers"),
    (json.dumps({**LLAMA, "num_hidden_layers": -32}), "num_hidden_layers"),
    (json.dumps({**LLAMA, "num_hidden_layers": 32.0}), "num_hidden_layers"),
    (json.dumps({**LLAMA, "num_hidden_layers": True}), "num_hidden_layers"),
    (json.dumps({**LLAMA, "num_hidden_layers": "32"}), "num_hidden_layers"),
    (json.dumps({**LLAMA, "num_hidden_layers": 2**40}), "num_hidden_layers"),
    (json.dumps({**LLAMA, "hidden_size": [4096]}), "hidden_size"),
    (json.dumps({**LLAMA, "num_attention_heads": 0}), "num_attention_heads"),
    (json.dumps({**LLAMA, "num_key_value_heads": -8}), "num_key_value_heads"),
    (json.dumps({**LLAMA, "num_key_value_heads": 5}), "num_key_value_heads"),
    (json.dumps({**LLAMA, "head_dim": 0}), "head_dim"),
    (json.dumps({**LLAMA, "hidden_size": 16}), "hidden_size"),
    (json.dumps({**LLAMA, "intermediate_size": -1}), "intermediate_size"),
    (json.dumps({**LLAMA, "vocab_size": -1}), "vocab_size"),
    (json.dumps({**LLAMA, "kv_lora_rank": -512}), "kv_lora_rank"),
    (json.dumps({**LLAMA, "_name_or_path": ["x"]}), "_name_or_path"),
    (json.dumps({"num_hidden_layers": 32, "hidden_size": 4096}), "num_attention_heads"),
    (json.dumps({"text_config": [LLAMA]}), "text_config"),
    ('{"num_hidden_layers": NaN, "hidden_size": 1, "num_attention_heads": 1}', "num_hidden_"),
    ('{"num_hidden_layers": 1e308, "hidden_size": 1, "num_attention_heads": 1}', "num_hidden_"),
    ("[" * 100_000, "config"),
]
MODEL_CONFIG_COMMANDS = [
    ["roofline", "--cached", "1", "--new", "1", "--model-config"],
    ["simulate", "--policy", "lru", "--capacity-gib", "1", "--model-config"],
    ["curve", "--model-config"],
    ["validate", "--model-config"],
]


@pytest.mark.parametrize(("text", "key"), CONFIGS)
@pytest.mark.parametrize("command", MODEL_CONFIG_COMMANDS, ids=lambda c: c[0])
def test_a_bad_model_config_names_the_file_and_the_key(
    tmp_path, capsys, command, text, key
) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    status, wh = run(tmp_path, [*command, str(path)])
    line = one_line(capsys, status)
    assert "--model-config" in line and str(path) in line and key in line
    assert not wh.exists()


def test_a_model_config_that_is_not_utf8_or_missing_is_one_line(tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"num_hidden_layers": "\xff"}')
    for bad in (path, tmp_path / "missing.json", tmp_path):
        status, _ = run(tmp_path, ["roofline", "--cached", "1", "--new", "1", "--model-config",
                                   str(bad)])  # fmt: skip
        assert str(bad) in one_line(capsys, status)


@settings(deadline=None, max_examples=60)
@given(
    layers=st.integers(1, 10_000),
    kv_heads=st.sampled_from([1, 2, 4, 8]),
    head_dim=st.integers(1, 2**16),
)
def test_a_config_within_bounds_gives_a_positive_kv_size(layers, kv_heads, head_dim) -> None:
    import tempfile

    config = {**LLAMA, "num_hidden_layers": layers, "num_key_value_heads": kv_heads,
              "head_dim": head_dim}  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(config))
        shape = ModelShape.from_hf_config(path)
    assert shape.kv_bytes_per_token() == 2 * layers * kv_heads * head_dim * 2
    assert shape.blocks_in(flags.MAX_GIB, 1) < 2**63  # no overflow of a block count


# --- --prices, key by key -------------------------------------------------------------------

PRICES = [
    ("gpu_hour = true\n", "gpu_hour"),
    ("gpu_hour = false\n", "gpu_hour"),
    ("gpu_hour = nan\n", "gpu_hour"),
    ("gpu_hour = inf\n", "gpu_hour"),
    ("gpu_hour = -inf\n", "gpu_hour"),
    ("gpu_hour = 1e308\n", "gpu_hour"),
    ("gpu_hour = -1\n", "gpu_hour"),
    ("gpu_hour = -0.0\n", "gpu_hour"),
    ("gpu_hour = 0\n", "gpu_hour"),
    ('gpu_hour = "2.5"\n', "gpu_hour"),
    ("gpu_hour = [2.5]\n", "gpu_hour"),
    ("[gpu_hour]\nx = 1\n", "gpu_hour"),
    ("gpu_hour = 2023-01-01\n", "gpu_hour"),
    ("dram_gb_hour = 1e300\n", "dram_gb_hour"),
    ("store_gb_hour = -0.001\n", "store_gb_hour"),
    ("gpu_hours = 2.5\n", "gpu_hours"),
    ("'' = 2.5\n", "unknown price"),
    ("gpu_hour = \n", "not TOML"),
    ("gpu_hour = 0x10\ngpu_hour = 1\n", "not TOML"),
]


@pytest.mark.parametrize(("text", "key"), PRICES)
def test_a_bad_price_names_the_file_and_the_key(tmp_path, capsys, text, key) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    status, wh = run(tmp_path, ["plan", "--prices", str(path)])
    line = one_line(capsys, status)
    assert "--prices" in line and str(path) in line and key in line
    assert not wh.exists()
    with pytest.raises(ValueError, match=key):
        load_prices(path)


def test_integer_prices_are_prices_and_a_free_store_is_allowed(tmp_path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text("gpu_hour = 3\nstore_gb_hour = 0\n")
    prices = load_prices(path)
    assert (prices.gpu_hour, prices.store_gb_hour) == (3.0, 0.0)
    assert isinstance(prices.gpu_hour, float)


# --- GPU specs: the bounds hold and every accepted spec prices a finite, positive time ------


@settings(deadline=None, max_examples=60)
@given(
    tflops=st.floats(MIN_TFLOPS, MAX_TFLOPS, allow_nan=False),
    tbps=st.floats(0.001, MAX_TBPS, allow_nan=False),
)
def test_an_accepted_gpu_spec_has_a_finite_positive_ridge(tflops: float, tbps: float) -> None:
    spec = resolve_gpu(f"mine:{tflops!r}:{tbps!r}")
    assert spec.name == "mine"
    assert math.isfinite(spec.ridge) and spec.ridge > 0


@settings(deadline=None, max_examples=60)
@given(st.text(max_size=12))
def test_a_number_flag_takes_only_what_it_can_bound(text: str) -> None:
    """Whatever the text, a list flag gives distinct positive integers or refuses."""
    import argparse

    try:
        values = flags.int_list(text)
    except argparse.ArgumentTypeError as exc:
        assert "\n" not in str(exc)
        return
    assert values and len(set(values)) == len(values)
    assert all(1 <= v <= flags.INT64_MAX for v in values)


# --- a stage that fails inside the flow: the command's one line, nothing of Prefect's -------

BROKEN = {
    "only bad lines": (["not json", '{"x": 1}', "[]"], []),
    "a tenant field that matches nothing": (
        ['{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'] * 3,
        ["--tenant-field", "org.name"],
    ),
}


@pytest.mark.flow
@pytest.mark.slow
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_failing_stage_is_one_line_without_prefects_tracebacks(
    prefect_server, tmp_path, capfd, case
) -> None:
    """capfd: Prefect's console handler writes to the process's stderr as it was when Prefect
    was imported, which only a capture of file descriptor 2 sees."""
    lines, extra = BROKEN[case]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(f"{line}\n" for line in lines if line))
    argv = ["fleet-report", "--input", str(log), "--warehouse", str(tmp_path / "wh.duckdb"),
            "--out", str(tmp_path / "r.html"), *extra]  # fmt: skip
    status = main(argv)
    err = capfd.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and "Task run" not in err and "Flow run" not in err, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("prefixscope fleet-report: error: "), err
    assert not (tmp_path / "wh.duckdb").exists()  # ingest refused the file before any write


@pytest.mark.parametrize(
    ("contents", "earlier", "refused"),
    [
        ([b""], False, True),
        ([b"\n  \n", b""], False, True),
        ([gzip.compress(b"\n\n")], False, True),
        ([b""], True, False),  # earlier requests: a run between two logs measures them
    ],
)
def test_inputs_with_no_request_are_refused_before_any_write(
    tmp_path, sample_path, contents, earlier, refused
) -> None:
    from prefixscope.pipelines.parameters import refuse_nothing_to_report

    wh = tmp_path / "wh.duckdb"
    if earlier:
        argv = ["ingest", "--format", "mooncake", "--input", str(sample_path), "--warehouse"]
        assert main([*argv, str(wh)]) == 0
    paths = []
    for i, data in enumerate(contents):
        (path := tmp_path / f"log{i}.jsonl").write_bytes(data)
        paths.append(str(path))
    if not refused:
        refuse_nothing_to_report(paths, str(wh))
        return
    with pytest.raises(ValueError, match="no request to report on — give --input"):
        refuse_nothing_to_report(paths, str(wh))
    assert not wh.exists()


RECORDS = [
    # (logger, level, with a traceback, shown on the terminal)
    ("prefect.task_runs", "ERROR", False, False),
    ("prefect.flow_runs", "ERROR", True, False),
    ("prefect.flow_runs", "CRITICAL", False, False),
    ("prefect.task_runs", "WARNING", False, True),  # a stage's own warning (replay skipped)
    ("prefect.flow_runs", "INFO", False, True),
    ("prefect.client", "WARNING", True, False),  # no traceback, from any of Prefect's loggers
    ("prefect.server", "ERROR", False, True),
    ("distributed", "ERROR", True, True),  # not Prefect's: not the filter's to judge
]


@pytest.mark.parametrize(("name", "level", "traceback", "shown"), RECORDS)
def test_the_terminal_drops_run_failures_and_tracebacks_only(name, level, traceback, shown):  # type: ignore[no-untyped-def]
    import logging
    import sys

    from prefixscope.pipelines.console import RunFailures

    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info() if traceback else None
    record = logging.LogRecord(name, getattr(logging, level), __file__, 1, "m", (), exc_info)
    assert RunFailures().filter(record) is shown


def test_only_the_console_handlers_hold_the_filter_and_only_while_the_flow_runs() -> None:
    import logging

    from prefect.logging.handlers import APILogHandler, PrefectConsoleHandler

    from prefixscope.pipelines.console import (
        RunFailures,
        console_handlers,
        failures_off_the_terminal,
    )

    def filtered() -> set[type[logging.Handler]]:
        handlers = {h for lg in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
                    if isinstance(lg, logging.Logger) for h in lg.handlers}  # fmt: skip
        return {type(h) for h in handlers if any(isinstance(f, RunFailures) for f in h.filters)}

    with failures_off_the_terminal():
        assert console_handlers()  # Prefect's logging is set up: a console to keep quiet
        inside = filtered()
    assert PrefectConsoleHandler in inside and APILogHandler not in inside
    assert not filtered()


SLO = ["plan", "--deployments", "h100x1", "--model", "llama-3-8b"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        # float() reads other scripts' digits and underscores; a person's number is ASCII
        ([*SLO, "--slo", "ttft-p95=２"], "the limit must be a number"),
        ([*SLO, "--slo", "ttft-p95=1_0_"], "the limit must be a number"),
        ([*SLO, "--slo", "ttft-p95=1_0"], "the limit must be a number"),
        ([*SLO, "--slo", "ttft-p95=2", "--slo-window", "１h"], "--slo-window"),
        ([*SLO, "--slo", "ttft-p95=2", "--slo-window", "36_00"], "--slo-window"),
        # text that is data must be UTF-8: not a codec error, the flag named
        (["export", "--format", "mooncake", "--salt", "s\udcff"], "--salt: s\\xff is not UTF-8"),
        (["explain", "--request", "r\udcff"], "--request: r\\xff is not UTF-8"),
    ],
)
def test_a_number_or_text_no_person_types_is_refused_by_its_flag(
    tmp_path, capsys, argv, needle  # noqa: ANN001
) -> None:
    status, wh = run(tmp_path, argv)
    assert needle in one_line(capsys, status)
    assert not wh.exists()


@pytest.mark.parametrize(
    ("config", "named"),
    [
        # the catalog's own shape under its name: the catalog's model
        ({"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
          "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}, True),
        # another shape under the catalog's name: named apart, never priced as the catalog's
        ({**LLAMA, "num_hidden_layers": 40, "hidden_size": 5120}, False),
    ],
)  # fmt: skip
def test_a_config_under_a_catalog_name_is_that_model_only_with_its_shape(
    tmp_path, config, named
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "_name_or_path": "llama-3-8b"}))
    shape = resolve_model(config=path)
    assert (shape.name == "llama-3-8b") is named
    if not named:
        assert shape.name.startswith("llama-3-8b+") and shape != resolve_model("llama-3-8b")
        assert resolve_model(config=path).name == shape.name  # the same shape, the same name


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["simulate", "--policy", "pinned", "--pin", "{fifo}", "--capacity-blocks", "9"],
         "not a list of block hashes"),
        (["simulate", "--policy", "lru", "--isolation", "partitioned", "--quota-file", "{fifo}",
          "--capacity-blocks", "9"], "not a quota file"),
        (["simulate", "--policy", "lru", "--isolation", "partitioned", "--quota-file",
          "{shares}", "--capacity-blocks", "9"], "line 2: not tenant,share with a finite share"),
        (["ingest", "--format", "openai", "--tokenizer", "{fifo}", "--input", "{fifo}"],
         "--tokenizer {fifo} is not a regular file"),
        # a hash past 64 bits (or below 0) once overflowed into an internal error
        (["simulate", "--policy", "pinned", "--pin", "{hashes}", "--capacity-blocks", "9"],
         "line 2: not a block hash (0 to 2^64 - 1)"),
        (["fleet", "--policy", "pinned", "--pin", "{hashes}", "--capacity-blocks", "9",
          "--replicas", "2", "--router", "round-robin"], "line 2: not a block hash"),
    ],
    ids=["pin list", "quota file", "quota share not a number", "tokenizer", "pin hash",
         "fleet pin hash"],
)  # fmt: skip
def test_a_pipe_or_a_bad_line_in_a_flags_file_is_one_line(
    tmp_path, capsys, sample_path, argv, says
) -> None:
    """A FIFO with no writer named as a pin list or quota file would block its read; each is
    refused unread in one line, as the config and GPU files are, with the right cause."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    shares = tmp_path / "shares.csv"
    shares.write_text("tenant,share\ndefault,nan\n")
    hashes = tmp_path / "pins.txt"
    hashes.write_text("0x10\n18446744073709551616\n")
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--format", "mooncake", "--input", str(sample_path),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    capsys.readouterr()
    args = [a.format(fifo=fifo, shares=shares, hashes=hashes) for a in argv]
    assert main([*args, "--warehouse", str(wh)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says.format(fifo=fifo) in err, err


def test_a_reader_that_goes_away_is_no_error(tmp_path, sample_path) -> None:
    """``prefixscope … | head``: the reader closes the pipe before the command writes; the
    command ends as a shell reports it (141), with nothing on stderr, its work done."""
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--format", "mooncake", "--input", str(sample_path),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    argv = [sys.executable, "-m", "prefixscope", "simulate", "--warehouse", str(wh),
            "--policy", "lru", "--capacity-blocks", "100"]  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # before the command has printed anything
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 141
    assert err == b""
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM hit_rates").fetchone()[0] > 0


@pytest.mark.parametrize("text", ["1,1.0000000000000002", "2,2.0000001", "0.5,0.50000004"])
def test_load_scales_that_print_alike_are_refused(text: str) -> None:
    """Tables and answers print a load scale to six digits: two that agree there would be one
    load shown twice (``At 1× the logged load`` for both)."""
    with pytest.raises(argparse.ArgumentTypeError, match="print alike"):
        flags.load_scales(text)
    assert flags.load_scales("1,1.001") == [1.0, 1.001]


@pytest.mark.parametrize(
    ("argv", "unknown"),
    [
        (["deployment", "--deployment", "h100x1", "--gpu", "h100"], "--gpu"),
        (["roofline", "--cached", "1", "--new", "1", "--deploy", "h100x2"], "--deploy"),
        (["deployment", "--deployment", "h100x1", "--kv", "fp8"], "--kv"),
    ],
)
def test_a_flag_is_never_read_as_the_longer_flag_it_begins(
    argv: list[str], unknown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``deployment --gpu FILE`` was read as ``--gpu-memory-utilization FILE``: an abbreviation
    is refused as the unknown flag it is, and means nothing when a flag is added later."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {unknown}" in err and err.count("\n") == 1

"""fleet_report on a schedule: the deployment, run-time input patterns, and the refusal
without a server that outlives the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixscope import cli

pytestmark = pytest.mark.flow


def test_the_deployment_carries_the_cron_schedule_and_the_parameters() -> None:
    from prefixscope.pipelines.deployments import fleet_report_deployment
    from prefixscope.pipelines.fleet_report import FlowParameters, fleet_report

    params = FlowParameters(
        inputs=("/logs/*.gz",), warehouse_path="/w.duckdb", report_path="/r", workers=2
    )
    deployment = fleet_report_deployment("15 * * * *", params, name="hourly")
    assert deployment.name == "hourly"
    assert [s.schedule.cron for s in deployment.schedules] == ["15 * * * *"]
    assert deployment.entrypoint == "prefixscope.pipelines.fleet_report.fleet_report"
    # what the server stores is JSON, and each run validates it back into the same parameters
    stored = json.loads(json.dumps(deployment.parameters))
    assert fleet_report.validate_parameters(stored) == {"params": params}


@pytest.mark.parametrize(
    ("names", "inputs", "expected"),
    [
        (["b.jsonl", "a.jsonl", "c.txt"], ["*.jsonl"], ["a.jsonl", "b.jsonl"]),
        (["a.jsonl"], ["a.jsonl", "missing.jsonl"], ["a.jsonl", "missing.jsonl"]),  # kept as is
        (["h01.gz", "h02.gz"], ["h0[2].gz", "h01.gz"], ["h02.gz", "h01.gz"]),
    ],
)
def test_input_patterns_are_expanded_when_a_run_starts(tmp_path: Path, names, inputs, expected):  # type: ignore[no-untyped-def]
    from prefixscope.pipelines.fleet_report import expand_inputs

    for n in names:
        (tmp_path / n).write_text("")
    got = expand_inputs([str(tmp_path / i) for i in inputs])
    assert got == [str(tmp_path / e) for e in expected]


def test_a_pattern_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    from prefixscope.pipelines.fleet_report import expand_inputs

    with pytest.raises(FileNotFoundError, match="no input file matches"):
        expand_inputs([str(tmp_path / "*.jsonl")])


@pytest.mark.timeout(60)  # were a server found, the command would serve until stopped
def test_schedule_refuses_without_a_prefect_server(monkeypatch, capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from prefect.settings import PREFECT_API_URL, temporary_settings

    # No server: neither in the environment nor in the settings (the flow tests' session
    # server sets PREFECT_API_URL there while it runs).
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    argv = ["schedule", "--cron", "0 * * * *", "--input", "x", "--warehouse", str(tmp_path / "w")]
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert not PREFECT_API_URL.value()
        assert cli.main(argv) == 2
    assert "prefect server start" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("inputs", "error"),
    [
        (["logs/*.jsonl.gz"], None),  # no log yet: the runs expand it as they start
        (["logs/h[0-9]/*.gz"], None),
        (["nowhere/*.gz"], "the folder of --input"),
        (["logs/missing.jsonl"], "No such file"),
        ([], "at least one --input"),
    ],
)
def test_a_schedule_is_served_before_its_logs_exist(tmp_path: Path, inputs, error) -> None:  # type: ignore[no-untyped-def]
    from prefixscope.pipelines.parameters import pending_inputs

    (tmp_path / "logs").mkdir()
    given = [str(tmp_path / i) for i in inputs]
    if error is None:
        assert pending_inputs(given) == given
    else:
        with pytest.raises((ValueError, OSError), match=error):
            pending_inputs(given)

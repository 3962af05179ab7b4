"""The flow when the machine runs out: a worker process killed mid-stage ends the run with one
line, keeping the stages that finished; the same command run again resumes from them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import duckdb
import pytest

from prefixscope.analysis.plan import slo_plan
from prefixscope.cli import main
from tests.conftest import conversation_lines, mooncake_line

pytestmark = [pytest.mark.flow, pytest.mark.slow]

#: This test process: the killing task spares it (a round of one task runs here, not forked).
HERE = os.getpid()
REAL_PROBE = slo_plan.probe_task


def killing_probe(shared: object, task: object) -> object:
    """A task of the SLO search that kills the worker it runs on, as the kernel does when
    memory runs out."""
    if os.getpid() != HERE:
        os.kill(os.getpid(), signal.SIGKILL)
    return REAL_PROBE(shared, task)  # type: ignore[arg-type]


def runs(wh: Path) -> list[tuple[str, str]]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute("SELECT command, status FROM runs ORDER BY started_at").fetchall()


def test_a_killed_worker_ends_the_run_in_one_line_and_a_rerun_resumes(
    prefect_server, tmp_path: Path, monkeypatch, capsys  # noqa: ANN001
) -> None:
    lines = conversation_lines(80, start_every_s=4, turn_every_s=30)
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    wh, page = tmp_path / "wh.duckdb", tmp_path / "report.html"
    argv = ["fleet-report", "--input", str(log), "--warehouse", str(wh), "--out", str(page),
            "--capacity-blocks", "50,200"]  # fmt: skip

    monkeypatch.setattr(slo_plan, "probe_task", killing_probe)
    assert main([*argv, "--workers", "2"]) == 1
    err = capsys.readouterr().err
    said = [x for x in err.splitlines() if x.startswith("prefixscope fleet-report:")]
    assert len(said) == 1, err
    assert said[0].startswith("prefixscope fleet-report: error: the plan-slo stage lost a worker")
    assert "killed by SIGKILL" in said[0] and "GiB of memory" in said[0]
    assert "--workers 1" in said[0] and "Traceback" not in err
    before = runs(wh)
    finished = ("ingest", "simulate", "curve", "structure", "fleet", "plan")
    assert before[:6] == [(c, "succeeded") for c in finished]
    assert before[6] == ("plan-slo", "failed") and len(before) == 7
    assert not page.exists()

    # the same command, as the line advises with one worker: it resumes
    monkeypatch.setattr(slo_plan, "probe_task", REAL_PROBE)
    assert main([*argv, "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "reused ingest, simulate, curve, structure, fleet, plan:" in err
    after = runs(wh)
    assert after[:7] == before
    assert [c for c, s in after[7:]] == ["plan-slo", "savings", "report"]
    assert all(s == "succeeded" for _, s in after[7:]) and page.exists()

    # --fresh runs every stage again
    assert main([*argv, "--fresh"]) == 0
    assert "reused" not in capsys.readouterr().err
    commands = [c for c, s in runs(wh) if s == "succeeded"]
    assert commands.count("ingest") == 2 and commands.count("simulate") == 2


def test_a_prefect_server_that_cannot_be_reached_is_one_line(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(mooncake_line(i * 1000, 1024, 8, [1, 2 + i]) for i in range(20)))
    env = {**os.environ, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    out = subprocess.run(
        [sys.executable, "-m", "prefixscope.cli", "fleet-report", "--input", str(log),
         "--warehouse", str(tmp_path / "wh.duckdb"), "--out", str(tmp_path / "r.html")],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("prefixscope fleet-report: error: the flow lost its Prefect server")
    assert "run the same command again to resume" in lines[0]

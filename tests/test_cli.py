"""The command line: the README's commands, their output and their exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from prefixscope.cli import main
from tests.conftest import mooncake_line


def test_ingest_simulate_report_from_the_command_line(tmp_path: Path, write_lines, capsys) -> None:
    wh = tmp_path / "wh.duckdb"
    src = write_lines(
        [mooncake_line(timestamp=i, hash_ids=[1, 2 + i % 2]) for i in range(6)] + ["{oops"]
    )
    assert (
        main(
            [
                "ingest",
                "--format",
                "mooncake",
                "--input",
                str(src),
                "--warehouse",
                str(wh),
                "--tenant",
                "acme",
                "--start",
                "2026-11-01T00:00:00Z",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "7 lines, 6 accepted, 1 rejected" in out
    assert "total: 7 lines = 6 accepted + 1 rejected" in out

    assert (
        main(
            [
                "simulate",
                "--warehouse",
                str(wh),
                "--policy",
                "ceiling,lru",
                "--capacity-blocks",
                "2,3",
                "--window",
                "all,last-half",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "lru" in out and "2 blk" in out and "last-half" in out

    page = tmp_path / "page.html"
    assert main(["report", "--warehouse", str(wh), "--out", str(page)]) == 0
    assert page.exists()
    con = duckdb.connect(str(wh), read_only=True)
    assert con.execute("SELECT count(*) FROM hit_rates WHERE tenant = '*'").fetchone() == (2 * 3,)
    assert [
        r[0] for r in con.execute("SELECT command FROM runs ORDER BY started_at").fetchall()
    ] == ["ingest", "simulate", "report"]
    con.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--policy", "lru", "--capacity-blocks", "5"], "no warehouse at"),
        (["simulate", "--policy", "nope", "--capacity-blocks", "5"], "unknown policy"),
        (["ingest", "--format", "mooncake", "--input", "/no/such/file"], "no such input file"),
    ],
)
def test_user_errors_exit_2_with_a_message_not_a_traceback(tmp_path, capsys, argv, message) -> None:
    assert main([*argv, "--warehouse", str(tmp_path / "wh.duckdb")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_console_script_is_installed() -> None:
    exe = Path(sys.executable).with_name("prefixscope")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("prefixscope ")

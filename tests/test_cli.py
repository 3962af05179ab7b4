"""The command line: the README's commands, their output and their exit codes."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from prefixscope import cli
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


def test_every_command_is_listed_with_its_module() -> None:
    """``cli.MODULES`` names each module's commands, so that a run imports only its own."""
    listed = dict(cli.MODULES)
    for info in pkgutil.iter_modules(cli.__path__):
        if info.name == "__main__":  # runs the command line when imported
            continue
        module = importlib.import_module(f"prefixscope.cli.{info.name}")
        defined = getattr(module, "COMMANDS", None) or (
            (module.COMMAND,) if hasattr(module, "COMMAND") else ()
        )
        assert tuple(c.name for c in defined) == listed.get(info.name, ()), info.name


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["ingest", "--format", "mooncake"], "ingest"),
        (["--lock-timeout", "5", "savings", "--warehouse", "w"], "savings"),
        (["--lock-timeout=5", "fleet-report"], "fleet-report"),
        (["-h", "ingest"], None),
        (["--version"], None),
        (["nope", "ingest"], None),
        ([], None),
    ],
)
def test_a_run_names_its_command_before_anything_is_imported(argv, named) -> None:
    assert cli.named_command(argv) == named


def test_ingest_imports_none_of_the_other_commands_libraries(tmp_path, write_lines) -> None:
    """The ingest command's start is part of its time: it loads no dataframe, template, flow,
    plotting or GPU library it does not use."""
    log = write_lines(
        ['{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}']
    )
    script = (
        "import sys; from prefixscope.cli import main; "
        f"assert main(['ingest', '--format', 'mooncake', '--input', {str(log)!r}, "
        f"'--warehouse', {str(tmp_path / 'wh.duckdb')!r}]) == 0; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'polars', 'jinja2', 'prefect', 'torch', 'plotly'}))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]"

"""Every error a user can cause is one line on stderr and exit status 2, never a traceback;
an interrupt exits 130; a warehouse the command cannot use is left exactly as it was; a run
killed mid-way is marked 'abandoned' by the next command (docs/operations.md)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from prefixscope import warehouse
from prefixscope.cli import main

READ_COMMANDS = {
    "report": ["report", "--out", "{tmp}/r.html"],
    "simulate": ["simulate", "--policy", "lru", "--capacity-blocks", "100"],
    "curve": ["curve"],
    "structure": ["structure"],
    "savings": ["savings"],
    "replay": ["replay"],
    "fleet": ["fleet", "--replicas", "2", "--router", "round-robin", "--capacity-blocks", "9"],
    "plan": ["plan"],
    "explain": ["explain", "--request", "x", "--capacity-blocks", "9"],
}


def snapshot(path: Path) -> tuple[str, int] | None:
    if not path.exists() or path.is_dir():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def one_line_error(capsys: pytest.CaptureFixture[str], status: int, code: int = 2) -> str:
    err = capsys.readouterr().err
    assert status == code, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("prefixscope"), err
    return lines[0]


FLAG_MISUSE = [
    (["ingest", "--format", "mooncake", "--input", "x", "--block-size", str(2**63)], "block-size"),
    (["ingest", "--format", "mooncake", "--input", "x", "--block-size", "2000000"], "block-size"),
    (["ingest", "--format", "mooncake", "--input", "x", "--block-size", "0"], "block-size"),
    (["ingest", "--format", "mooncake", "--input", "x", "--block-size", "ten"], "block-size"),
    (["ingest", "--format", "nope", "--input", "x"], "--format"),
    (["ingest", "--format", "mooncake"], "--input"),
    (["ingest", "--format", "mooncake", "--input", "x", "--start", "yesterday"], "--start"),
    (["simulate", "--policy", "lru", "--capacity-blocks", str(2**63)], "capacity-blocks"),
    (["simulate", "--policy", "lru", "--capacity-blocks", "1e5"], "capacity-blocks"),
    (["simulate", "--policy", "lru", "--capacity-blocks", "-5"], "capacity-blocks"),
    (["simulate", "--policy", "lru", "--capacity-tokens", str(2**64)], "capacity-tokens"),
    (["simulate", "--policy", "lru", "--capacity-gib", "inf", "--model", "llama-3-8b"], "gib"),
    (["simulate", "--policy", "lru", "--capacity-gib", "nan", "--model", "llama-3-8b"], "gib"),
    (["simulate", "--policy", "lru", "--capacity-gib", "1e300", "--model", "llama-3-8b"], "gib"),
    (["simulate", "--policy", "ttl", "--capacity-blocks", "5", "--ttl", "inf"], "--ttl"),
    (["simulate", "--policy", "lru", "--capacity-blocks", "5", "--bucket", "infs"], "--bucket"),
    (["simulate", "--policy", "lru", "--capacity-blocks", "5", "--capacity-tokens", "5"], "not"),
    (["fleet", "--replicas", "0", "--router", "random", "--capacity-blocks", "5"], "--replicas"),
    (["fleet", "--replicas", "2", "--router", "nope", "--capacity-blocks", "5"], "unknown router"),
    (["fleet", "--replicas", "99", "--router", "random", "--capacity-blocks", "5"], "1 to 64"),
    (["fleet", "--replicas", "2", "--router", "random"], "capacity"),
    (["fleet", "--replicas", "2", "--router", "random", "--capacity-blocks", "5", "--load-scale",
      "0"], "--load-scale"),
    (["fleet", "--replicas", "2", "--router", "random", "--capacity-blocks", "5", "--policy",
      "ceiling"], "--policy"),
    (["fleet", "--replicas", "2", "--router", "kv-aware", "--capacity-blocks", "5", "--policy",
      "belady"], "stateful router"),
    (["fleet", "--replicas", "2", "--router", "random", "--capacity-gib", "1", "--model", "gpt"],
     "unknown model"),
    (["fleet", "--replicas", "2", "--router", "random", "--capacity-blocks", "5", "--gpu", "tpu"],
     "unknown GPU"),
    (["plan", "--target", "0"], "--target"),
    (["explain", "--capacity-blocks", "5"], "--request"),
    (["explain", "--request", "x", "--capacity-blocks", "0"], "capacity-blocks"),
    (["explain", "--request", "x", "--policy", "nope"], "--policy"),
    (["plan", "--target", "1.5"], "--target"),
    (["plan", "--window", "steady"], "--window"),
    (["plan", "--prices", "{tmp}/none.toml"], "none.toml"),
    (["curve", "--sample-rate", "nan"], "sample-rate"),
    (["curve", "--sample-rate", "2"], "sample-rate"),
    (["structure", "--capacity-blocks", str(2**70)], "capacity-blocks"),
    (["structure", "--top", "0"], "--top"),
    (["savings", "--capacity-blocks", "99999999999999999999999"], "capacity-blocks"),
    (["roofline", "--cached", "-1", "--new", "5"], "--cached"),
    (["report", "--out", "{tmp}"], "is a directory"),
    (["fleet-report", "--input", "x", "--out", "{tmp}"], "is a directory"),
    (["--lock-timeout", "nan", "report"], "lock-timeout"),
    (["report", "--lock-timeout", "-1"], "lock-timeout"),
    (["nosuchcommand"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "needle"), FLAG_MISUSE)
def test_flag_misuse_is_one_line(tmp_path, capsys, argv, needle) -> None:
    wh = tmp_path / "wh.duckdb"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    extra = ["--warehouse", str(wh)] if argv[0] not in ("roofline", "--lock-timeout") else []
    if argv[0] == "nosuchcommand":
        extra = []
    line = one_line_error(capsys, main([*argv, *extra]))
    assert needle in line
    assert " — " in line
    assert not wh.exists()


def _foreign(path: Path) -> None:
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE invoices AS SELECT 1 AS id")


def _not_duckdb(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 4000)


def _text(path: Path) -> None:
    path.write_text("timestamp,tokens\n1,2\n" * 500)


def _directory(path: Path) -> None:
    path.mkdir()


STATES = {"directory": _directory, "sqlite": _not_duckdb, "text": _text, "foreign": _foreign}
STATE_COMMANDS = {
    "ingest": ["ingest", "--format", "mooncake", "--input", "{sample}"],
    "simulate": ["simulate", "--policy", "lru", "--capacity-blocks", "100"],
    "report": ["report", "--out", "{tmp}/r.html"],
    "structure": ["structure"],
    "fleet": ["fleet", "--replicas", "2", "--router", "kv-aware", "--capacity-blocks", "9"],
}


@pytest.mark.parametrize("command", sorted(STATE_COMMANDS))
@pytest.mark.parametrize("state", sorted(STATES))
def test_unusable_warehouse_is_one_line_and_unchanged(
    tmp_path, capsys, sample_path, state, command
) -> None:
    wh = tmp_path / "wh.duckdb"
    STATES[state](wh)
    before = snapshot(wh)
    listing = sorted(os.listdir(tmp_path))
    argv = [
        a.replace("{tmp}", str(tmp_path)).replace("{sample}", str(sample_path))
        for a in STATE_COMMANDS[command]
    ]
    line = one_line_error(capsys, main([*argv, "--warehouse", str(wh)]))
    assert {
        "directory": "is a directory",
        "sqlite": "not a DuckDB file",
        "text": "not a DuckDB file",
    }.get(state, "something else") in line
    assert snapshot(wh) == before
    assert sorted(os.listdir(tmp_path)) == listing  # no page, no WAL beside it


@pytest.mark.parametrize("command", sorted(READ_COMMANDS))
def test_read_command_on_a_missing_warehouse_creates_nothing(tmp_path, capsys, command) -> None:
    wh = tmp_path / "missing.duckdb"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in READ_COMMANDS[command]]
    line = one_line_error(capsys, main([*argv, "--warehouse", str(wh)]))
    assert "no warehouse at" in line and "prefixscope ingest" in line
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits: cannot make one")
def test_read_only_warehouse_is_one_line(tmp_path, capsys, bundled_warehouse) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    wh.chmod(0o444)
    before = snapshot(wh)
    line = one_line_error(capsys, main(["structure", "--warehouse", str(wh)]))
    assert "permission denied" in line
    assert snapshot(wh) == before


def test_full_disk_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    """A full disk while opening (simulated: DuckDB's error, as it reports ENOSPC)."""

    def full(*args, **kwargs):
        raise duckdb.IOException('IO Error: Could not write file "x": No space left on device')

    monkeypatch.setattr(duckdb, "connect", full)
    line = one_line_error(
        capsys,
        main(
            [
                "ingest",
                "--format",
                "mooncake",
                "--input",
                __file__,
                "--warehouse",
                str(tmp_path / "w"),
            ]
        ),
    )
    assert "no space left" in line


def test_oserror_enospc_is_one_line(tmp_path, capsys, monkeypatch, bundled_warehouse) -> None:
    from prefixscope.stages import report

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "r.html"))

    monkeypatch.setattr(report, "build_report", full)
    wh = bundled_warehouse.copy_to(tmp_path)
    line = one_line_error(
        capsys, main(["report", "--warehouse", str(wh), "--out", str(tmp_path / "r.html")])
    )
    assert "no space left" in line
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT status FROM runs WHERE command = 'report'").fetchall() == [
            ("failed",)
        ]


def test_unexpected_error_is_one_internal_line(capsys, monkeypatch) -> None:
    from prefixscope.analysis.cost import models

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(models, "resolve_model", broken)
    line = one_line_error(capsys, main(["roofline", "--cached", "5", "--new", "5"]), code=1)
    assert (
        line
        == "prefixscope roofline: internal error: RuntimeError: boom second line (please report)"
    )


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: d / "missing.json", "does not exist"),
        (lambda d: (d / "t.json").write_text("{not json") and d / "t.json", "not a tokenizer"),
        (
            lambda d: (d / "t.json").write_bytes(b"\xff\xfe\x00garbage") and d / "t.json",
            "tokenizer",
        ),
        (lambda d: d, "is a directory"),
    ],
)
def test_bad_tokenizer_is_one_line(tmp_path, capsys, write_lines, make, needle) -> None:
    log = write_lines(['{"messages": [{"role": "user", "content": "hi"}]}'])
    tok = make(tmp_path)
    wh = tmp_path / "wh.duckdb"
    argv = ["ingest", "--format", "openai", "--input", str(log), "--tokenizer", str(tok)]
    line = one_line_error(capsys, main([*argv, "--warehouse", str(wh)]))
    assert needle in line and str(tok) in line
    assert not wh.exists()


def test_broken_chat_template_is_one_line(tmp_path, capsys, write_lines) -> None:
    log = write_lines(['{"messages": [{"role": "user", "content": "hi"}]}'])
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m.content }")
    wh = tmp_path / "wh.duckdb"
    argv = ["ingest", "--format", "openai", "--input", str(log), "--chat-template", str(template)]
    line = one_line_error(capsys, main([*argv, "--warehouse", str(wh)]))
    assert "does not compile" in line
    assert not wh.exists()


def test_request_field_dot_is_one_line(tmp_path, capsys, write_lines) -> None:
    log = write_lines(['{"messages": [{"role": "user", "content": "hi"}]}'])
    wh = tmp_path / "wh.duckdb"
    status = main(
        ["ingest", "--format", "openai", "--input", str(log), "--request-field", ".",
         "--warehouse", str(wh)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) <= 1
    assert status in (0, 2)


def test_a_locked_warehouse_waits_then_fails_cleanly(tmp_path, capsys, bundled_warehouse) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb,sys,time; c=duckdb.connect(sys.argv[1]); "
         "print('ready', flush=True); time.sleep(60)", str(wh)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready"
        before = snapshot(wh)
        warehouse._noticed = False
        started = time.monotonic()
        status = main(["--lock-timeout", "1", "report", "--warehouse", str(wh), "--out",
                       str(tmp_path / "r.html")])  # fmt: skip
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    notice, line = err.splitlines()
    assert notice == warehouse.WAIT_NOTICE
    assert "in use by another process" in line and "--lock-timeout" in line
    assert waited >= 1  # it waited out --lock-timeout (how much longer is the machine's)
    assert snapshot(wh) == before
    assert not (tmp_path / "r.html").exists()


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Mooncake log that takes the ingest several seconds: long enough to be interrupted."""
    path = tmp_path_factory.mktemp("big") / "big.jsonl"
    line = (
        '{{"timestamp": {0}, "input_length": 1500, "output_length": 5, '
        '"hash_ids": [{0}, {1}, {2}]}}'
    )
    path.write_text("\n".join(line.format(i, i + 1, i + 2) for i in range(1_000_000)) + "\n")
    return path


def _prefixscope(*args: str, tmpdir: Path | None = None) -> subprocess.Popen[str]:
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.Popen(
        [sys.executable, "-m", "prefixscope.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _ingesting(tmp_path: Path, big_log: Path, wh: Path) -> subprocess.Popen[str]:
    """An ingest of ``big_log`` that has recorded its run and is staging the file: its
    staging folder has appeared in its own temporary directory. Waiting for that, rather
    than for a fixed time, keeps the interrupt inside the run on fast and slow machines."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = _prefixscope("ingest", "--format", "mooncake", "--input", str(big_log), "--warehouse",
                        str(wh), tmpdir=tmpdir)  # fmt: skip
    deadline = time.monotonic() + 60
    while not any(tmpdir.glob("prefixscope-*")) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    time.sleep(0.2)
    return proc


@pytest.mark.slow
def test_ctrl_c_exits_130_with_one_line(tmp_path, big_log) -> None:
    proc = _ingesting(tmp_path, big_log, tmp_path / "wh.duckdb")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1 and "interrupted" in err


@pytest.mark.slow
def test_kill_9_then_the_next_command_marks_the_run_abandoned(
    tmp_path, bundled_warehouse, big_log
) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    proc = _ingesting(tmp_path, big_log, wh)
    proc.kill()
    proc.wait()  # reaped: its pid is no longer alive
    assert main(["report", "--warehouse", str(wh), "--out", str(tmp_path / "r.html")]) == 0
    with duckdb.connect(str(wh), read_only=True) as con:
        rows = con.execute(
            "SELECT command, status, error, finished_at IS NOT NULL, pid FROM runs "
            "ORDER BY started_at"
        ).fetchall()
    assert rows[-2] == ("ingest", "abandoned", warehouse.ABANDONED, True, proc.pid)
    assert rows[-1][:2] == ("report", "succeeded")


def test_a_live_run_is_not_marked_abandoned(tmp_path, bundled_warehouse) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    with warehouse.connect(wh) as con:
        mine = warehouse.start_run(con, "simulate", {})
        other = warehouse.start_run(con, "simulate", {})
        con.execute("UPDATE runs SET host = 'elsewhere' WHERE run_id = ?", [other])
        stale = warehouse.start_run(con, "simulate", {})
        con.execute(
            "UPDATE runs SET host = 'elsewhere', started_at = now() - INTERVAL 2 DAY "
            "WHERE run_id = ?",
            [stale],
        )
    with warehouse.connect(wh) as con:
        status = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
    assert (status[mine], status[other], status[stale]) == ("running", "running", "abandoned")

"""A warehouse under a hostile disk and hostile order of commands: a full disk and a read-only
one are each one line naming the cause, and the file holds exactly what docs/operations.md
says (at most the command's own run row); a missing input creates no warehouse; every
"run … first" error says what to do after ` — `; the block-size advice fits the source.

The disks are real: a small tmpfs, mounted for the test (root only; skipped elsewhere), filled
to a given room, or remounted read-only."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from prefixscope import warehouse
from prefixscope.cli import describe, main
from tests.test_block_size import token_log

KIB = 1024
#: The tmpfs: the bundled warehouse, its re-ingest with --replace and a small simulate fit.
DISK_SIZE = "16M"


@dataclass(frozen=True)
class Disk:
    root: Path

    def fill(self, room: int) -> None:
        """Fill the disk with a filler file, leaving ``room`` bytes free."""
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        with (self.root / "filler").open("wb") as f:
            f.write(b"\0" * max(free - room, 0))

    def empty(self) -> None:
        (self.root / "filler").unlink(missing_ok=True)

    def remount_read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.root)], check=True)

    def listing(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.name != "filler")


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    """A small tmpfs of its own, with this process's temporary folder on it (so staging files
    and spills meet the same full disk); unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small disk needs root")
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(root)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (root / "tmp").mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))
        yield Disk(root)
    finally:
        subprocess.run(["umount", str(root)], check=False)


def sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def one_line(capsys: pytest.CaptureFixture[str], status: int) -> str:
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("prefixscope ") and " — " in err, err
    return err.strip()


#: What a command can change: the runs, and the rows of every table a command writes.
COUNTED = ("requests", "sources", "rejects", "hit_rates", "hit_rate_timeseries", "request_outcomes")


def contents(path: Path) -> tuple[list[tuple], dict[str, int]]:
    with duckdb.connect(str(path), read_only=True) as con:
        runs = con.execute(
            "SELECT run_id, command, status FROM runs ORDER BY started_at, run_id"
        ).fetchall()
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED}
    return runs, counts


def assert_as_documented(wh: Path, before: tuple[list[tuple], dict[str, int]], cmd: str) -> None:
    """docs/operations.md: the warehouse holds what it held, and at most the command's own run
    row, 'failed' (or 'running' when the disk took not even that); none of its results."""
    runs, counts = contents(wh)
    assert counts == before[1]
    assert runs[: len(before[0])] == before[0]
    added = runs[len(before[0]) :]
    assert len(added) <= 1, added
    assert all(c == cmd and s in ("failed", "running") for _, c, s in added), added


COMMANDS = {
    "ingest": ["ingest", "--format", "mooncake", "--input", "{sample}", "--replace"],
    "simulate": ["simulate", "--policy", "lru,fifo", "--capacity-blocks", "100,1000"],
    "report": ["report", "--out", "{out}/r.html"],
}
#: Rooms from none at all, through enough for the run's row but not its results (a report's
#: results are its page, elsewhere: only no room at all stops it).
ROOMS = (0, 16 * KIB, 64 * KIB, 256 * KIB)
FULL = [(c, r) for c in sorted(COMMANDS) for r in ROOMS if c != "report" or r == 0]


def argv_of(command: str, sample: Path, wh: Path, out: Path) -> list[str]:
    words = [a.format(sample=sample, out=out) for a in COMMANDS[command]]
    return [*words, "--warehouse", str(wh)]


@pytest.mark.parametrize(("command", "room"), FULL)
def test_a_full_disk_is_one_line_and_the_warehouse_as_documented(
    tmp_path, capsys, disk, bundled_warehouse, sample_path, command, room
) -> None:
    wh = disk.root / "wh.duckdb"
    shutil.copy(bundled_warehouse.path, wh)
    before, before_sha = contents(wh), sha(wh)
    disk.fill(room)
    status = main(argv_of(command, sample_path, wh, tmp_path))
    line = one_line(capsys, status)
    assert "no space left" in line and str(disk.root) in line
    # DuckDB's complaints about the aftermath are not the cause
    assert "rollback" not in line and "invalidated" not in line
    assert set(disk.listing()) <= {"wh.duckdb", "wh.duckdb.wal", "tmp"}
    assert os.listdir(disk.root / "tmp") == []  # no staging file left behind
    if room == 0:  # not even the run's row fitted: the file is byte for byte as it was
        assert sha(wh) == before_sha and disk.listing() == ["tmp", "wh.duckdb"]
    disk.empty()
    assert_as_documented(wh, before, command)
    assert main(argv_of(command, sample_path, wh, tmp_path)) == 0  # and it is usable again
    capsys.readouterr()


@pytest.mark.parametrize("room", ROOMS + (1024 * KIB,))
def test_an_ingest_into_a_new_warehouse_on_a_full_disk(capsys, disk, sample_path, room) -> None:
    """No warehouse is left, or (when the disk took its start but not its rows) one that holds
    the run's row alone: 'failed', or 'running' when the disk took not even that."""
    wh = disk.root / "wh.duckdb"
    disk.fill(room)
    argv = ["ingest", "--format", "mooncake", "--input", str(sample_path), "--warehouse", str(wh)]
    line = one_line(capsys, main(argv))
    assert "no space left" in line
    assert set(disk.listing()) <= {"wh.duckdb", "wh.duckdb.wal", "tmp"}
    disk.empty()
    if wh.exists():
        runs, counts = contents(wh)
        [(_, command, state)] = runs
        assert command == "ingest" and state in ("failed", "running")
        assert set(counts.values()) == {0}
    else:
        assert disk.listing() == ["tmp"]


def test_a_page_written_onto_a_full_disk_leaves_no_half_page(
    tmp_path, capsys, disk, bundled_warehouse
) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    page = disk.root / "r.html"
    page.write_text("the earlier page")
    disk.fill(64 * KIB)  # the page (Plotly inline) is megabytes
    line = one_line(capsys, main(["report", "--warehouse", str(wh), "--out", str(page)]))
    assert "no space left" in line and str(disk.root) in line
    assert page.read_text() == "the earlier page"
    assert disk.listing() == ["r.html", "tmp"]
    runs, _ = contents(wh)
    assert (runs[-1][1], runs[-1][2]) == ("report", "failed")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_read_only_disk_is_one_line_and_the_warehouse_unchanged(
    tmp_path, capsys, disk, bundled_warehouse, sample_path, command
) -> None:
    wh = disk.root / "wh.duckdb"
    shutil.copy(bundled_warehouse.path, wh)
    before = sha(wh)
    disk.remount_read_only()
    line = one_line(capsys, main(argv_of(command, sample_path, wh, tmp_path)))
    assert "read-only" in line and str(wh) in line and "--warehouse" in line
    assert sha(wh) == before and disk.listing() == ["tmp", "wh.duckdb"]


def test_an_open_that_finds_the_schema_current_writes_nothing(tmp_path, bundled_warehouse) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    warehouse.connect(wh).close()  # the copy's first open may bring its views up to date
    before = (sha(wh), wh.stat().st_mtime_ns)
    warehouse.connect(wh).close()
    assert (sha(wh), wh.stat().st_mtime_ns) == before
    assert sorted(os.listdir(tmp_path)) == ["bundled.duckdb"]


def _write(path: Path) -> None:
    path.write_text('{"timestamp": 1, "input_length": 5}\n' + "not a mooncake line\n" * 20)


@pytest.mark.parametrize(
    ("make", "needle"),
    [(lambda p: None, "missing"), (_write, "does not look like")],
    ids=["missing", "unparseable"],
)
def test_a_failed_ingest_creates_no_warehouse(tmp_path, capsys, make, needle) -> None:
    log = tmp_path / "missing.jsonl"
    make(log)
    wh = tmp_path / "new" / "wh.duckdb"
    argv = ["ingest", "--format", "mooncake", "--input", str(log), "--warehouse", str(wh)]
    one_line(capsys, main(argv))
    assert not (tmp_path / "new").exists()


#: Commands in the order a user might wrongly run them, on an empty warehouse and on one that
#: holds requests only: each error must say what to do.
EARLY = {
    "simulate": ["simulate", "--policy", "lru", "--capacity-blocks", "100"],
    "fleet": ["fleet", "--replicas", "2", "--router", "round-robin", "--capacity-blocks", "9"],
    "plan": ["plan"],
    "curve": ["curve"],
    "structure": ["structure"],
    "explain": ["explain", "--request", "x", "--capacity-blocks", "9"],
    "validate": ["validate"],
    "savings": ["savings"],
    "replay": ["replay"],
}


@pytest.mark.parametrize("state", ["empty", "ingested"])
@pytest.mark.parametrize("command", sorted(EARLY))
def test_every_error_of_a_command_run_too_early_says_what_to_do(
    tmp_path, capsys, empty_warehouse, bundled_warehouse, state, command
) -> None:
    wh = tmp_path / "wh.duckdb"
    shutil.copy(empty_warehouse if state == "empty" else bundled_warehouse.path, wh)
    status = main([*EARLY[command], "--warehouse", str(wh)])
    err = capsys.readouterr().err
    if status == 0:  # enough for this command already (a simulate after an ingest)
        return
    assert status == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    what, _, todo = err.partition(" — ")
    assert todo.strip(), err
    if "first" in err:  # a "run … first": the command to run is after the dash
        assert "run `prefixscope" in todo or "ingest" in todo, err


@pytest.mark.parametrize(
    ("source", "size", "needle", "not_needle"),
    [
        ("mooncake", 256, "whole multiples of 512", "ingest"),
        ("mooncake", 768, "whole multiples of 512", "ingest"),
        ("tokens", 8, "ingest the log again with --block-size 8", None),
        ("tokens", 24, "ingest the log again with --block-size 24", None),
    ],
)
def test_the_block_size_advice_fits_the_source(
    tmp_path, capsys, bundled_warehouse, source, size, needle, not_needle
) -> None:
    if source == "mooncake":
        wh = bundled_warehouse.copy_to(tmp_path)
    else:
        wh = tmp_path / "wh.duckdb"
        log = token_log(tmp_path / "t.jsonl")
        ingest = ["ingest", "--format", "tokens", "--input", str(log)]
        assert main([*ingest, "--warehouse", str(wh)]) == 0
        capsys.readouterr()
    argv = ["simulate", "--policy", "lru", "--capacity-blocks", "100", "--block-size", str(size)]
    line = one_line(capsys, main([*argv, "--warehouse", str(wh)]))
    assert needle in line.partition(" — ")[2], line
    if not_needle:
        assert not_needle not in line, line
    runs, counts = contents(wh)
    assert (runs[-1][1], runs[-1][2], counts["hit_rates"]) == ("simulate", "failed", 0)


def _raised_while_handling(first: BaseException, then: BaseException) -> BaseException:
    """``then``, raised while ``first`` was handled: the chain a failed rollback makes."""
    try:
        try:
            raise first
        except BaseException:
            raise then  # noqa: B904
    except BaseException as exc:
        return exc


def no_space() -> duckdb.Error:
    return duckdb.IOException('IO Error: Could not write file "/d/wh.duckdb.wal": No space left')


def rollback() -> duckdb.Error:
    return duckdb.TransactionException(
        "TransactionContext Error: cannot rollback - no transaction is active"
    )


def invalidated() -> duckdb.Error:
    return duckdb.FatalException("FATAL Error: database has been invalidated")


@pytest.mark.parametrize(
    ("exc", "needles"),
    [
        (_raised_while_handling(no_space(), rollback()), ("no space left", "/d/wh.duckdb.wal")),
        (_raised_while_handling(no_space(), invalidated()), ("no space left", "/d/wh.duckdb.wal")),
        (
            duckdb.TransactionException(
                'TransactionContext Error: Failed to commit: Could not write file "/d/w": '
                "No space left on device"
            ),
            ("no space left", "/d/w"),
        ),
        (OSError(28, "No space left on device", "/d/r.html"), ("no space left", "/d/r.html")),
        (OSError("[Errno 28] Error writing bytes to file: No space left"), ("no space left",)),
        (
            duckdb.IOException('IO Error: Cannot open file "/d/w.wal": Permission denied'),
            ("permission denied", "/d/w.wal"),
        ),
        (PermissionError(13, "Permission denied", "/d/w.wal"), ("permission denied", "/d/w.wal")),
        (
            duckdb.IOException('IO Error: Cannot open file "/d/w": Read-only file system'),
            ("read-only", "/d/w"),
        ),
        (OSError(30, "Read-only file system", "/d/r.html"), ("read-only", "/d/r.html")),
        (
            _raised_while_handling(ValueError("the cause — do this"), rollback()),
            ("the cause — do this",),
        ),
    ],
)
def test_describe_names_the_cause_not_its_aftermath(exc, needles) -> None:
    line = describe(exc)
    assert " — " in line and "\n" not in line
    assert all(n in line for n in needles), line
    assert "rollback" not in line and "invalidated" not in line


def test_a_not_null_this_version_dropped_is_dropped_once(tmp_path, bundled_warehouse) -> None:
    """An older warehouse's NOT NULL on a column that may now be NULL (validation's capacity,
    when too few reports fit one) is dropped at the first write open, and later opens write
    nothing."""
    wh = bundled_warehouse.copy_to(tmp_path)
    warehouse.connect(wh).close()
    with duckdb.connect(str(wh)) as con:
        con.execute("ALTER TABLE validation ALTER COLUMN capacity_blocks SET NOT NULL")
    warehouse.connect(wh).close()
    with duckdb.connect(str(wh), read_only=True) as con:
        (nullable,) = con.execute(
            "SELECT is_nullable FROM duckdb_columns() "
            "WHERE table_name = 'validation' AND column_name = 'capacity_blocks'"
        ).fetchone()
    assert nullable
    before = (sha(wh), wh.stat().st_mtime_ns)
    warehouse.connect(wh).close()
    assert (sha(wh), wh.stat().st_mtime_ns) == before


def _parquet(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2]}), path)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("rows.csv", lambda p: p.write_text("a,b\n1,2\n")),
        ("rows.json", lambda p: p.write_text('{"a": 1}\n')),
        ("rows.jsonl", lambda p: p.write_text('{"a": 1}\n{"a": 2}\n')),
        ("rows.parquet", _parquet),
        ("pipe", lambda p: os.mkfifo(p)),
        # empty: DuckDB opens such a name as a database in memory, and keeps nothing
        ("empty.csv", lambda p: p.write_bytes(b"")),
        ("empty.parquet", lambda p: p.write_bytes(b"")),
        ("empty.ndjson", lambda p: p.write_bytes(b"")),
    ],
)
@pytest.mark.parametrize("command", ["ingest", "simulate"])
def test_a_file_that_is_not_a_duckdb_warehouse_is_refused_and_left_alone(
    tmp_path, capsys, sample_path, name, make, command  # noqa: ANN001
) -> None:
    """DuckDB opens a CSV, JSON or Parquet file as an empty database of views over it, so an
    ingest would report its rows and keep none; a FIFO would block the open. Each is refused
    in one line, exit 2, and left as it was."""
    wh = tmp_path / name
    make(wh)
    before = None if wh.is_fifo() else wh.read_bytes()
    args = {
        "ingest": ["ingest", "--format", "mooncake", "--input", str(sample_path)],
        "simulate": ["simulate", "--policy", "lru", "--capacity-blocks", "10"],
    }[command]
    assert main([*args, "--warehouse", str(wh)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert any(why in err for why in ("not a DuckDB file", "not a regular file", "in memory"))
    assert (wh.is_fifo() if before is None else wh.read_bytes() == before)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_file_of_another_block_size_is_refused_before_it_is_written(
    tmp_path, capsys, sample_path  # noqa: ANN001
) -> None:
    """A cache has one block size, so a warehouse of two could never be simulated: the file
    that would mix them is refused in one line, and the warehouse keeps what it had."""
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--format", "mooncake", "--input", str(sample_path),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    other = tmp_path / "other.jsonl"
    other.write_text(
        '{"timestamp": 1, "input_length": 40, "output_length": 2, "hash_ids": [7, 8]}\n'
    )
    capsys.readouterr()
    assert main(["ingest", "--format", "mooncake", "--input", str(other), "--block-size", "32",
                 "--warehouse", str(wh)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "32-token blocks, the warehouse's of 512" in err, err
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT DISTINCT block_size FROM requests").fetchall() == [(512,)]
        assert con.execute("SELECT count(*) FROM sources").fetchone() == (1,)

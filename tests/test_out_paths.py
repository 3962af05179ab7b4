"""What ``--out`` may replace: only a regular file. ``export``, ``metrics`` and ``report`` write
whole files by renaming a temporary file onto the path, which would turn a symbolic link, a
device (``/dev/null`` as root) or a pipe into a regular file: each is refused in one line, exit
2, and left as it was. A temporary file left by a killed export is removed by the next."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from prefixscope.cli import main


def symlink(folder: Path) -> Path:
    target = folder / "target.txt"
    target.write_text("keep\n")
    link = folder / "out"
    link.symlink_to(target)
    return link


def fifo(folder: Path) -> Path:
    path = folder / "out"
    os.mkfifo(path)
    return path


COMMANDS = {
    "export": ["export", "--format", "mooncake"],
    "metrics": ["metrics"],
    "report": ["report"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    ("make", "says"),
    [
        (symlink, "is a symbolic link"),
        (fifo, "is not a regular file"),
        (lambda _: Path("/dev/null"), "is not a regular file"),
    ],
)
def test_out_replaces_only_a_regular_file(
    tmp_path: Path, bundled_warehouse, capsys, command: str, make: Callable, says: str  # noqa: ANN001
) -> None:
    out = make(tmp_path)
    kind = (out.is_symlink(), out.is_fifo(), out.is_char_device())
    wh = bundled_warehouse.copy_to(tmp_path)
    assert main([*COMMANDS[command], "--warehouse", str(wh), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert (out.is_symlink(), out.is_fifo(), out.is_char_device()) == kind
    if out.is_symlink():
        assert out.read_text() == "keep\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_a_killed_exports_temporary_file_goes_with_the_next_export(
    tmp_path: Path, bundled_warehouse  # noqa: ANN001
) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    out = tmp_path / "trace.jsonl"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(ended.stdout)
    stale = tmp_path / f".{out.name}.{dead}.abc12345.partial"
    stale.write_text("half a file")
    mine = tmp_path / f".{out.name}.{os.getpid()}.keep1234.partial"  # a live writer's: kept
    mine.write_text("in progress")
    # a live write to trace.jsonl.<digits>: its name starts as this export's would
    neighbour = tmp_path / f".{out.name}.{dead}.{os.getpid()}.abcdefgh.partial"
    neighbour.write_text("another export in progress")
    assert main(["export", "--format", "mooncake", "--warehouse", str(wh), "--out", str(out)]) == 0
    assert out.stat().st_size > 0
    assert not stale.exists() and mine.exists() and neighbour.exists()

"""Write a file whole or not at all: into a temporary file beside it, then ``os.replace`` onto
it. A reader (node_exporter's textfile collector, a replay tool) sees the old file or the new
one, never half of either; a failure leaves no temporary file and the old file as it was. Only
a regular file is ever replaced: a symbolic link, a device or a pipe at the path is refused,
never turned into a file. A temporary file names its writer's process, so one left by a
process that was killed is removed by the next write to the same path."""

from __future__ import annotations

import glob
import gzip
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from prefixscope.runs import process_alive


def check_writable(out: Path, flag: str = "--out") -> None:
    """Refuse, before any work, a path whose folder is missing or not writable, or that is a
    folder itself: one line saying what to do."""
    if out.is_dir():
        raise ValueError(f"{flag} {out} is a directory — give a file path")
    folder = out.parent
    if not folder.is_dir():
        raise ValueError(f"{flag} {out}: the folder {folder} does not exist — create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {out}: the folder {folder} is not writable — give another path")
    check_regular(out, flag)
    if out.exists() and not os.access(out, os.W_OK):
        raise ValueError(f"{flag} {out} is not writable — give another path")


def check_regular(out: Path, flag: str = "--out") -> None:
    """Refuse a path that holds something other than a regular file: replacing it would turn a
    symbolic link, a device (``/dev/null``) or a pipe into a file."""
    if out.is_symlink():
        raise ValueError(f"{flag} {out} is a symbolic link — give the path of a regular file")
    if out.exists() and not out.is_file():
        raise ValueError(
            f"{flag} {out} is not a regular file (a device or a pipe) — give a file path"
        )


def _remove_stale(out: Path) -> None:
    """Temporary files of earlier writes to ``out`` whose process has ended (killed)."""
    # exactly ``.NAME.PID.XXXXXXXX.partial`` (mkstemp's eight characters): ``.t.*.partial``
    # alone would also take the live file of a write to ``t.4194000``
    ours = re.compile(rf"\.{re.escape(out.name)}\.(\d+)\.[a-z0-9_]{{8}}\.partial")
    for temp in out.parent.glob(f".{glob.escape(out.name)}.*.partial"):
        m = ours.fullmatch(temp.name)
        if m and not process_alive(int(m.group(1))):
            temp.unlink(missing_ok=True)


def write_lines(out: Path, lines: Iterable[str], *, gz: bool | None = None) -> int:
    """Write ``lines`` (each without its newline) to ``out``, gzip-compressed when ``gz`` (by
    default: when the name ends in ``.gz``); returns the lines written."""
    gz = out.name.endswith(".gz") if gz is None else gz
    _remove_stale(out)
    prefix = f".{out.name}.{os.getpid()}."
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=prefix, suffix=".partial")
    temp = Path(name)
    count = 0
    try:
        with os.fdopen(fd, "wb") as raw:
            # mtime=0: the same lines give the same bytes, run after run
            stream = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if gz else raw
            try:
                for line in lines:
                    stream.write(line.encode("utf-8") + b"\n")
                    count += 1
            finally:
                if gz:
                    stream.close()
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(temp, 0o644)  # mkstemp's 0600 would keep a collector of another user out
        check_regular(out)  # again: the path may have changed while the lines were written
        os.replace(temp, out)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return count


def write_text(out: Path, text: str) -> None:
    """``text`` to ``out``, atomically (never compressed)."""
    write_lines(out, [text[:-1] if text.endswith("\n") else text], gz=False)

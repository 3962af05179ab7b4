"""Write a file whole or not at all: into a temporary file beside it, then ``os.replace`` onto
it. A reader (node_exporter's textfile collector, a replay tool) sees the old file or the new
one, never half of either; a failure leaves no temporary file and the old file as it was."""

from __future__ import annotations

import gzip
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


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
    if out.exists() and not os.access(out, os.W_OK):
        raise ValueError(f"{flag} {out} is not writable — give another path")


def write_lines(out: Path, lines: Iterable[str], *, gz: bool | None = None) -> int:
    """Write ``lines`` (each without its newline) to ``out``, gzip-compressed when ``gz`` (by
    default: when the name ends in ``.gz``); returns the lines written."""
    gz = out.name.endswith(".gz") if gz is None else gz
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
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
        os.replace(temp, out)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return count


def write_text(out: Path, text: str) -> None:
    """``text`` to ``out``, atomically (never compressed)."""
    write_lines(out, [text[:-1] if text.endswith("\n") else text], gz=False)

"""A small text file a flag names (a config.json, a GPU's or a price list's TOML), read with a
bound: the one reader ``analysis/cost/hfconfig.py``, ``analysis/cost/gpufile.py`` and
``analysis/cost/prices.py`` share, so each refuses what cannot be its file in the same words.

At most ``max_bytes + 1`` bytes are read, so a wrong path to a large file (a log, a model's
weights) costs no more than that and stops in one line. Every failure is a ValueError of one
line, ``WHAT — WHAT TO DO``: the file cannot be opened (missing, a folder, no permission), is
not a regular file (a FIFO, which would block the read, a device), is larger than the bound,
or is not UTF-8. Parsing it is the caller's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_text(path: str | Path, max_bytes: int, what: str, fix: str) -> str:
    """The UTF-8 text of ``path``; ``what`` names the file in a refusal (``a config.json``),
    ``fix`` says what to do (``fix the GPU file``)."""
    try:
        # opened without blocking, so a FIFO with no writer cannot hang the command; then
        # anything but a regular file (a pipe, a device, a socket) is refused unread
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ValueError(f"{path} is not a regular file: not {what} — {fix}")
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc} — check the path") from None
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {_size(max_bytes)}: not {what} — {fix}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text: not {what} — {fix}") from None


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 2**10} KiB"

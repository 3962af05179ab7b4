"""What went wrong with the disk, found in an error and everything it was raised while handling.

A full disk rarely surfaces as itself. DuckDB reports it inside whatever it was doing (``IO
Error: Could not write file "X": No space left on device``, ``TransactionContext Error: Failed
to commit: …``, ``FATAL Error: database has been invalidated … Original error: …``), and the
error that reaches the command is often a later one, raised while handling the first: a
rollback of a transaction the failed write had already ended (``cannot rollback - no
transaction is active``), or a failure to record the failure. So the cause is looked for along
the whole chain (``__cause__``, then ``__context__``), not in the last error alone.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb

#: The texts DuckDB (and the C library it quotes) gives each cause, with its errno.
_CAUSES = (
    (errno.ENOSPC, "No space left", "full"),
    (errno.EDQUOT, "Disk quota exceeded", "full"),
    (errno.EROFS, "Read-only file system", "read-only"),
    (errno.EACCES, "Permission denied", "permission"),
)

#: DuckDB names the file it failed on in double quotes: ``Could not write file "X": …``.
_QUOTED_FILE = re.compile(r'file "([^"]+)"')

#: DuckDB errors that describe a transaction's state after an earlier failure, not a cause.
_AFTERMATH = ("no transaction is active", "has been invalidated", "Current transaction is aborted")


@dataclass(frozen=True)
class StorageCause:
    """``kind``: 'full', 'read-only' or 'permission'; ``file``: the file named, if any."""

    kind: str
    file: str | None


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then each error it was raised from or while handling (a ``from None`` ends it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:
            current = None
        else:
            current = current.__context__


def storage_cause(exc: BaseException) -> StorageCause | None:
    """The first disk problem along ``exc``'s chain: a full disk, a read-only file system or a
    permission refused, from an ``OSError``'s errno, else from the text (DuckDB's errors, and
    Arrow's, which carry no errno, quote the C library's)."""
    for link in chain(exc):
        for number, text, kind in _CAUSES:
            if isinstance(link, OSError) and link.errno == number:
                return StorageCause(kind, str(link.filename) if link.filename else None)
            if text in str(link):
                found = _QUOTED_FILE.search(str(link))
                return StorageCause(kind, found.group(1) if found else None)
    return None


def root_cause(exc: BaseException) -> BaseException:
    """The error that names the cause: past every DuckDB error that only describes the state
    an earlier failure left (a rollback with no transaction, an invalidated database)."""
    for link in chain(exc):
        if not (isinstance(link, duckdb.Error) and any(t in str(link) for t in _AFTERMATH)):
            return link
    return exc

"""DuckDB's memory bounded around one large query.

By default DuckDB may hold most of the machine's memory in its buffers and keeps what it
freed until the connection closes. A query that sorts or aggregates every lookup (the trace's
load, the warehouse's distinct-block count) then holds gigabytes beside the arrays a stage
builds from its answer. Within :func:`bounded` its buffers are capped (a sort or aggregate
spills past the cap to the database's temporary folder) and handed back as soon as freed;
after it, DuckDB's defaults hold again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

#: A size as DuckDB reads one: whole megabytes or gigabytes.
_SIZE = re.compile(r"[1-9][0-9]*(MB|GB)")


@contextmanager
def bounded(con: duckdb.DuckDBPyConnection, memory_limit: str) -> Iterator[None]:
    """Within the block, ``con``'s buffers at most ``memory_limit`` (``"1GB"``), freed memory
    given back past 64 MB; reset after, whether or not the block raised."""
    if not _SIZE.fullmatch(memory_limit):
        raise ValueError(f"a memory limit such as 512MB or 3GB, got {memory_limit!r}")
    settings = {"memory_limit": memory_limit, "allocator_flush_threshold": "64MB"}
    for name, value in settings.items():
        con.execute(f"SET {name} = '{value}'")  # a constant of ours, checked above
    try:
        yield
    finally:
        for name in settings:
            con.execute(f"RESET {name}")

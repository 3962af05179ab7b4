"""Parse a file's batches two at a time, in file order.

One batch's parse alternates between DuckDB (its SQL, on every core) and work on one thread (a
compiled scan, Arrow kernels); parsing the next batch meanwhile keeps both cores busy. Each
worker parses on its own DuckDB cursor of the same in-memory database (registered views and
settings belong to a connection), and results come back in batch order: the rows are exactly
those of a loop that parses one batch after the other.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from queue import SimpleQueue
from typing import TypeVar

import duckdb

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(
    fn: Callable[[duckdb.DuckDBPyConnection, T], R],
    items: Iterator[T],
    cursors: Sequence[duckdb.DuckDBPyConnection],
) -> Iterator[R]:
    """``fn(cursor, item)`` for each of ``items``, up to one per cursor at a time, yielded in
    the order of ``items``. An error is raised where its item's result would have been; items
    not started by then are not parsed."""
    free: SimpleQueue[duckdb.DuckDBPyConnection] = SimpleQueue()
    for cursor in cursors:
        free.put(cursor)

    def call(item: T) -> R:
        cursor = free.get()
        try:
            return fn(cursor, item)
        finally:
            free.put(cursor)

    pending: deque[Future[R]] = deque()
    with ThreadPoolExecutor(len(cursors), thread_name_prefix="prefixscope-parse") as pool:
        try:
            for item in items:
                pending.append(pool.submit(call, item))
                if len(pending) >= len(cursors):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()

"""Tables on a terminal: at most :data:`MAX_ROWS` rows, then one line with the count of the
rest and what shows them all -- a query on the warehouse, quoted so that it can be pasted into
a shell as it is (``duckdb WH "SELECT * FROM hit_rates WHERE run_id = '…'"``), or a command.
Every command's table goes through :func:`clip` (docs/operations.md#output).

Light on purpose (no polars, no duckdb): ``prefixscope ingest`` imports it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

#: The most rows of one table a command prints.
MAX_ROWS = 20

#: Characters a double-quoted shell word treats specially; a query without them is shown in
#: double quotes (single quotes inside are SQL's), else quoted by ``shlex``.
_SHELL_SPECIAL = re.compile(r'["$`\\!]')


def sql_literal(text: str) -> str:
    """``text`` as an SQL string literal (a quote doubled)."""
    return "'" + text.replace("'", "''") + "'"


def shell_word(text: str) -> str:
    """``text`` as one shell word: in double quotes where that is safe, else by ``shlex``."""
    return f'"{text}"' if not _SHELL_SPECIAL.search(text) else shlex.quote(text)


@dataclass(frozen=True)
class More:
    """What shows every row of a table: ``sql`` on the warehouse at ``warehouse``, or a
    ``command``."""

    warehouse: str = ""
    sql: str = ""
    command: str = ""

    @classmethod
    def of_run(cls, warehouse: str, table: str, run_id: str, column: str = "run_id") -> More:
        """Every row one run wrote to ``table`` (a name of ours, never from outside)."""
        return cls(warehouse, f"SELECT * FROM {table} WHERE {column} = {sql_literal(run_id)}")

    @classmethod
    def of_latest(cls, warehouse: str, table: str, command: str) -> More:
        """Every row the newest successful run of ``command`` wrote to ``table`` (run ids sort
        by time; both names are ours)."""
        newest = (
            f"SELECT max(run_id) FROM runs WHERE command = {sql_literal(command)} "
            "AND status = 'succeeded'"
        )
        return cls(warehouse, f"SELECT * FROM {table} WHERE run_id = ({newest})")

    def hint(self) -> str:
        if self.sql:
            return f"duckdb {shlex.quote(self.warehouse)} {shell_word(self.sql)}"
        return self.command


def clip(rows: Sequence[str], more: More | None, what: str = "rows") -> list[str]:
    """``rows`` when they are at most :data:`MAX_ROWS` (or ``more`` is None: not for a
    terminal), else the first :data:`MAX_ROWS` and ``… N more rows: HINT``."""
    if more is None or len(rows) <= MAX_ROWS:
        return list(rows)
    rest = len(rows) - MAX_ROWS
    return [*rows[:MAX_ROWS], f"… {rest:,} more {what}: {more.hint()}"]

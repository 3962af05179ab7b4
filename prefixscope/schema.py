"""The warehouse's tables and views, as this version's ``.sql`` files define them
(``prefixscope/sql``): tables are created when missing, views when missing or different."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import duckdb

from prefixscope import sql


def apply_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table that is missing, then (re)create every view that is missing or
    differs from this version's ``.sql`` files: tables are data and are never replaced; views
    are code and always match this version. A warehouse that already matches is not written
    at all, so a command that stops before its own first write (a full disk, a bad input)
    leaves the file byte for byte as it was."""
    for name in sql.schema_files():
        con.execute(sql.load(name))  # CREATE TABLE IF NOT EXISTS: no write when it exists
    # A NOT NULL an older version declared and this one does not: dropped where it is still
    # held, and only there (an ALTER in the .sql files would write on every open).
    for table, column in _not_null(con) - _declared().not_null:
        con.execute(f"ALTER TABLE {_quoted(table)} ALTER COLUMN {_quoted(column)} DROP NOT NULL")
    # Rows written before GPU-seconds counted every GPU, converted where there are any.
    for table, script in UNIT_MIGRATIONS.items():
        found = con.execute(  # the first such row, not a count: this runs on every open
            f"SELECT 1 FROM {_quoted(table)} WHERE gpu_seconds_unit IS NULL LIMIT 1"
        ).fetchone()
        if found:
            con.execute(sql.load(script))
    have = dict(
        con.execute(
            "SELECT view_name, sql FROM duckdb_views() "
            "WHERE NOT internal AND database_name = current_database()"
        ).fetchall()
    )
    for view, (text, stored) in _declared().views.items():
        if have.get(view) != stored:
            con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{text}")


#: Tables whose GPU-seconds once counted one replica's time -> the ``.sql`` that converts
#: such rows (each sets ``gpu_seconds_unit``, so it runs once per row).
UNIT_MIGRATIONS = {
    "savings": "catalog/gpu_seconds_savings",
    "fleet_hit_rates": "catalog/gpu_seconds_fleet",
}


def _quoted(identifier: str) -> str:
    """An identifier as DuckDB quotes one: in double quotes, an inner one doubled."""
    return '"' + identifier.replace('"', '""') + '"'


def _not_null(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    return set(con.execute(sql.load("catalog/not_null_columns")).fetchall())


@dataclass(frozen=True)
class Declared:
    """What this version's ``.sql`` files declare, read back from a scratch database."""

    views: dict[str, tuple[str, str]]  # name -> (its .sql text, the definition DuckDB stores)
    not_null: frozenset[tuple[str, str]]  # (table, column) of every NOT NULL column


@cache
def _declared() -> Declared:
    """Each view's name -> (its ``.sql`` text, the definition DuckDB stores for it), and the
    NOT NULL columns, read back from a scratch in-memory database: DuckDB stores a normalised
    form, and only that can be compared with a warehouse's."""
    texts = {}
    for name in sql.view_files():
        # views/00_fresh_runs -> fresh_runs: a leading NN_ only orders the files
        view = name.rsplit("/", 1)[-1].lstrip("0123456789").removeprefix("_")
        texts[view] = sql.load(name)
    with duckdb.connect(":memory:") as scratch:
        for name in sql.schema_files():
            scratch.execute(sql.load(name))
        for view, text in texts.items():
            scratch.execute(f"CREATE VIEW {view} AS\n{text}")
        stored = dict(
            scratch.execute(
                "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal"
            ).fetchall()
        )
        not_null = frozenset(_not_null(scratch))
    return Declared({view: (text, stored[view]) for view, text in texts.items()}, not_null)

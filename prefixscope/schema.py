"""The warehouse's tables and views, as this version's ``.sql`` files define them
(``prefixscope/sql``): tables are created when missing, views when missing or different."""

from __future__ import annotations

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
    have = dict(
        con.execute(
            "SELECT view_name, sql FROM duckdb_views() "
            "WHERE NOT internal AND database_name = current_database()"
        ).fetchall()
    )
    for view, (text, stored) in _views().items():
        if have.get(view) != stored:
            con.execute(f"CREATE OR REPLACE VIEW {view} AS\n{text}")


@cache
def _views() -> dict[str, tuple[str, str]]:
    """Each view's name -> (its ``.sql`` text, the definition DuckDB stores for it), the
    latter read back from a scratch in-memory database: DuckDB stores a normalised form, and
    only that can be compared with a warehouse's."""
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
    return {view: (text, stored[view]) for view, text in texts.items()}

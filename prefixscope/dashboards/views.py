"""The one way the page reads the warehouse: every row of a view, by name (the views live in
``prefixscope/sql/views`` and are created in the warehouse by ``warehouse.apply_schema``)."""

from __future__ import annotations

import duckdb
import polars as pl


def read_view(con: duckdb.DuckDBPyConnection, name: str) -> pl.DataFrame:
    """Every row of the view ``name``, in the view's own order. The name is looked up in the
    catalog as a name (``DuckDBPyConnection.view``), never parsed as SQL."""
    return con.view(name).pl()


def has_view(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the warehouse's catalog holds a view ``name`` (one a later version of the schema
    adds is absent from an older warehouse; the page leaves its section out)."""
    (found,) = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal", [name]
    ).fetchall()
    return bool(found[0])

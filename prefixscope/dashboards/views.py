"""The one way the page reads the warehouse: every row of a view, by name (the views live in
``prefixscope/sql/views`` and are created in the warehouse by ``warehouse.apply_schema``)."""

from __future__ import annotations

import duckdb
import polars as pl


def read_view(con: duckdb.DuckDBPyConnection, name: str) -> pl.DataFrame:
    """``SELECT * FROM name``: a view of the warehouse, in the view's own order."""
    if not name.isidentifier():
        raise ValueError(f"not a view name: {name!r}")
    return con.sql(f"SELECT * FROM {name}").pl()

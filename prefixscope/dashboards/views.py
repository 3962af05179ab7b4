"""The one way the page reads the warehouse: every row of a view, by name (the views live in
``prefixscope/sql/views`` and are created in the warehouse by ``warehouse.apply_schema``)."""

from __future__ import annotations

import duckdb
import polars as pl

from prefixscope.bounded import bounded


def read_view(con: duckdb.DuckDBPyConnection, name: str) -> pl.DataFrame:
    """Every row of the view ``name``, in the view's own order. The name is looked up in the
    catalog as a name (``DuckDBPyConnection.view``), never parsed as SQL. A router whose view
    of the caches lagged is named with its delay (:func:`delayed_routers`)."""
    return delayed_routers(con.view(name).pl())


def delayed_routers(df: pl.DataFrame) -> pl.DataFrame:
    """``router`` named with its ``router_delay_ms`` where that is above 0 (``kv-aware@100ms``),
    so a configuration that differs only by the delay reads as a router of its own."""
    if "router" not in df.columns or "router_delay_ms" not in df.columns:
        return df
    delay = pl.col("router_delay_ms").fill_null(0.0)
    ms = delay.map_elements(lambda v: f"{v:g}", return_dtype=pl.String)
    label = pl.col("router") + "@" + ms + "ms"
    return df.with_columns(router=pl.when(delay > 0).then(label).otherwise(pl.col("router")))


def has_view(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the warehouse's catalog holds a view ``name`` (one a later version of the schema
    adds is absent from an older warehouse; the page leaves its section out)."""
    (found,) = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal", [name]
    ).fetchall()
    return bool(found[0])


#: ``trace_summary``'s row, by what the warehouse's requests are (``trace.load._stamp``).
_SUMMARIES: dict[tuple, dict] = {}
#: DuckDB's buffers while it counts the distinct blocks (``bounded``): on the generated week
#: (250 M lookups, 158 M distinct) the row took 25.4 s and 7.56 GB unbounded, 14.2 s and
#: 1.13 GB within 1 GB (benchmarks/RESULTS.md, "Stop 71").
SUMMARY_MEMORY = "1GB"


def trace_summary(con: duckdb.DuckDBPyConnection) -> dict:
    """The one row of ``trace_summary``, read once per process while the requests stay the
    same: its distinct-block count is a pass over every lookup (14 s at 250 M), and the page's
    header, its cards and the flow's summary each want the row."""
    from prefixscope.analysis.trace.load import stamp_of

    stamp = stamp_of(con)
    found = _SUMMARIES.get(stamp) if stamp else None
    if found is None:
        with bounded(con, SUMMARY_MEMORY):
            found = read_view(con, "trace_summary").row(0, named=True)
        if stamp:
            _SUMMARIES.clear()
            _SUMMARIES[stamp] = found
    return dict(found)

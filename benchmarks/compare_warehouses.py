"""Compare the result tables of two warehouses, ignoring run ids: every row of ``hit_rates``,
``hit_rate_timeseries``, ``mrc``, the structure tables and ``savings`` must be identical.

    python benchmarks/compare_warehouses.py BEFORE.duckdb AFTER.duckdb

Used to show that a change which must not alter any figure (a refactor) did not: run
``make demo`` before and after, keep both ``build/demo.duckdb`` files, compare them.
Exit status 1 when a table differs; each table's row count and verdict is printed.
"""

from __future__ import annotations

import sys

import duckdb

TABLES = (
    "requests",
    "hit_rates",
    "hit_rate_timeseries",
    "request_outcomes",
    "mrc",
    "turns",
    "session_stats",
    "shared_prefixes",
    "hit_sources",
    "first_new_blocks",
    "reuse_times",
    "savings",
)
#: Columns that name a run, not a figure.
RUN_COLUMNS = {
    "run_id",
    "ingest_run_id",
    "outcomes_run_id",
    "cost_model_run_id",
    "structure_run_id",
}


def rows(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple]:
    cols = [c[0] for c in con.execute(f"DESCRIBE {table}").fetchall() if c[0] not in RUN_COLUMNS]
    select = ", ".join(f'"{c}"' for c in cols)
    return con.execute(f"SELECT {select} FROM {table} ORDER BY ALL").fetchall()


def main(before: str, after: str) -> int:
    a = duckdb.connect(before, read_only=True)
    b = duckdb.connect(after, read_only=True)
    differ = 0
    for table in TABLES:
        ra, rb = rows(a, table), rows(b, table)
        same = ra == rb
        differ += not same
        print(
            f"{table:<22} {len(ra):>9,} rows before, {len(rb):>9,} after: "
            f"{'identical' if same else 'DIFFERENT'}"
        )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))

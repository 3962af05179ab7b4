"""DuckDB's memory bounded around one query (``prefixscope.bounded``): the cap holds inside the
block, DuckDB's own settings come back after it (a raise included), and a limit that is not a
size is refused before anything is set."""

from __future__ import annotations

import duckdb
import pytest

from prefixscope.bounded import bounded


def setting(con: duckdb.DuckDBPyConnection, name: str) -> str:
    return con.execute("SELECT current_setting(?)", [name]).fetchone()[0]


def shown_bytes(shown: str) -> float:
    """A size as DuckDB shows it ("2.7 GiB", "488.2 MiB"), in bytes (to its one decimal)."""
    number, unit = shown.split()
    return float(number) * 2 ** {"KiB": 10, "MiB": 20, "GiB": 30}[unit]


@pytest.mark.parametrize("limit", ["512MB", "1GB", "3GB"])
def test_the_cap_holds_inside_and_the_defaults_come_back(limit: str) -> None:
    con = duckdb.connect()
    before = {n: setting(con, n) for n in ("memory_limit", "allocator_flush_threshold")}
    with bounded(con, limit):
        inside = setting(con, "memory_limit")
        flush = setting(con, "allocator_flush_threshold")
        # a distinct count answers within the cap
        query = "SELECT count(DISTINCT i % 1000003) FROM range(3000000) t(i)"
        (count,) = con.execute(query).fetchone()
    asked = int(limit[:-2]) * (10**6 if limit.endswith("MB") else 10**9)
    assert abs(shown_bytes(inside) - asked) <= 0.05 * asked, inside
    assert flush != before["allocator_flush_threshold"]
    assert count == 1000003
    assert {n: setting(con, n) for n in before} == before


def test_a_raise_inside_still_resets() -> None:
    con = duckdb.connect()
    before = setting(con, "memory_limit")
    with pytest.raises(duckdb.CatalogException), bounded(con, "1GB"):
        con.execute("SELECT * FROM no_such_table")
    assert setting(con, "memory_limit") == before


@pytest.mark.parametrize("limit", ["", "1 GB", "1GB'; DROP TABLE x; --", "0GB", "1TB", "-1GB"])
def test_a_limit_that_is_not_a_size_is_refused_before_anything_is_set(limit: str) -> None:
    con = duckdb.connect()
    before = setting(con, "memory_limit")
    with pytest.raises(ValueError, match="memory limit"), bounded(con, limit):
        pass
    assert setting(con, "memory_limit") == before

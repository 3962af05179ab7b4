"""Missed tokens by the gap before a request in its session (``misses_by_gap``): buckets on
hand-made sessions, the counts adding up to the configuration's, the bounds a flag."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope.analysis.simulation.gaps import GapBuckets, check_bounds
from prefixscope.cli import main


def req(t, ids, model="opus"):  # type: ignore[no-untyped-def]
    return {"t": t, "type": "s", "model": model, "in": 4 * len(ids) + 2, "out": 1,
            "hash_ids": ids, "stop": "tool_use", "api_time": 0.5}  # fmt: skip


@pytest.fixture(scope="module")
def agents_wh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tenants' worth of sessions, one of them with gaps of 0, 5, 30, 120 and 600 s and a
    sub-agent, ingested and simulated (ceiling, and LRU at two sizes)."""
    tmp = tmp_path_factory.mktemp("gaps")
    folder = tmp / "traces"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for c in range(6):
        times = [0.0, 5.0, 35.0, 155.0, 755.0]
        ids: list[int] = []
        reqs = []
        for t in times:
            ids = ids + rng.integers(0, 1000, 3).tolist()
            reqs.append(req(t, list(ids)))
        reqs.append({"t": 40.0, "type": "subagent", "agent_id": "s",
                     "requests": [req(0.0, [1, 2]), req(2.0, [1, 2, 3])]})  # fmt: skip
        (folder / f"c{c}.json").write_text(json.dumps({"id": f"c{c}", "block_size": 4,
                                                       "requests": reqs}))  # fmt: skip
    wh = tmp / "wh.duckdb"
    args = ["--warehouse", str(wh)]
    assert main(["ingest", "--format", "agent-json", "--input", str(folder), *args,
                 "--tenant", "agents", "--arrival", "uniform:2m"]) == 0  # fmt: skip
    assert main(["simulate", *args, "--policy", "ceiling,lru", "--capacity-blocks", "20,200"]) == 0
    return wh


def test_each_request_lands_in_its_gap_bucket(agents_wh: Path) -> None:
    with duckdb.connect(str(agents_wh), read_only=True) as con:
        rows = con.execute(
            "SELECT gap_bucket, subagent, requests FROM misses_by_gap "
            "WHERE policy = 'ceiling' AND tenant = '*' ORDER BY gap_low_s NULLS FIRST, subagent"
        ).fetchall()
    assert rows == [
        ("first", False, 6), ("first", True, 6),  # each conversation's and sub-agent's first
        ("<10s", False, 6), ("<10s", True, 6),  # 5 s; the sub-agent's second, 2 s after
        ("10s-1m", False, 6), ("1m-5m", False, 6), (">=5m", False, 6),
    ]  # fmt: skip


def test_buckets_add_up_to_each_configuration(agents_wh: Path) -> None:
    with duckdb.connect(str(agents_wh), read_only=True) as con:
        sums = con.execute(
            "SELECT m.policy, m.capacity_blocks, sum(m.requests), sum(m.missed_tokens), "
            "sum(m.share), any_value(h.requests), any_value(h.input_tokens - h.hit_tokens) "
            "FROM misses_by_gap m JOIN hit_rates h ON h.run_id = m.run_id AND h.policy = "
            "m.policy AND h.capacity_blocks IS NOT DISTINCT FROM m.capacity_blocks AND "
            "h.tenant = m.tenant AND h.measure_window = 'all' "
            "WHERE m.tenant = '*' GROUP BY ALL"
        ).fetchall()
    assert len(sums) == 3
    for _, _, requests, missed, share, want_requests, want_missed in sums:
        assert (requests, missed) == (want_requests, want_missed)
        assert share == pytest.approx(1.0)
    by = {(p, c): m for p, c, _, m, *_ in sums}
    assert by[("ceiling", None)] <= by[("lru", 200)] <= by[("lru", 20)]


def test_the_bounds_are_a_flag(agents_wh: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    wh = tmp_path / "wh.duckdb"
    wh.write_bytes(agents_wh.read_bytes())
    args = ["simulate", "--warehouse", str(wh), "--policy", "lru", "--capacity-blocks", "20"]
    assert main([*args, "--gap-bounds", "100"]) == 0
    assert "missed tokens by gap, lru shared 20 blocks: first" in capsys.readouterr().out
    with duckdb.connect(str(wh), read_only=True) as con:
        buckets = con.execute(
            "SELECT gap_bucket, sum(requests) FROM latest_misses_by_gap WHERE tenant = '*' "
            "AND policy = 'lru' AND capacity_blocks = 20 "
            "GROUP BY ALL ORDER BY min(gap_low_s) NULLS FIRST"
        ).fetchall()
    assert buckets == [("first", 12), ("<100s", 18), (">=100s", 12)]


@pytest.mark.parametrize("text", ["60,10", "0,10", "10,10", "-5", "nan", "1e99"])
def test_bad_bounds_are_refused_in_one_line(agents_wh: Path, capsys, text: str) -> None:  # type: ignore[no-untyped-def]
    code = main(["simulate", "--warehouse", str(agents_wh), "--policy", "lru",
                 "--capacity-blocks", "20", "--gap-bounds", text])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--gap-bounds" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("bounds", "labels"),
    [((10.0, 60.0, 300.0), ["<10s", "10s-1m", "1m-5m", ">=5m"]),
     ((1.5, 7200.0), ["<1.5s", "1.5s-2h", ">=2h"])],
)  # fmt: skip
def test_bucket_labels(bounds, labels) -> None:
    got = GapBuckets(check_bounds(bounds), np.zeros(0, np.int64), np.zeros(0, bool)).labels()
    assert [g[0] for g in got] == ["no session", "first", *labels]


def test_a_log_without_sessions_writes_no_rows(tmp_path: Path, sample_path: Path) -> None:
    wh = tmp_path / "wh.duckdb"
    args = ["--warehouse", str(wh)]
    assert main(["ingest", "--format", "mooncake", "--input", str(sample_path), *args]) == 0
    assert main(["simulate", *args, "--policy", "lru", "--capacity-blocks", "1000"]) == 0
    with duckdb.connect(str(wh), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM misses_by_gap").fetchall() == [(0,)]


def test_the_page_shows_the_buckets(agents_wh: Path, tmp_path: Path) -> None:
    wh = tmp_path / "wh.duckdb"
    wh.write_bytes(agents_wh.read_bytes())
    page = tmp_path / "report.html"
    assert main(["structure", "--warehouse", str(wh)]) == 0
    assert main(["report", "--warehouse", str(wh), "--out", str(page)]) == 0
    html = page.read_text()
    assert 'id="misses-by-gap"' in html
    assert all(b in html for b in ("10s-1m", "1m-5m", "&gt;=5m", "sub-agents"))


def test_the_page_table_keeps_the_tenants_that_name_sessions() -> None:
    import polars as pl

    from prefixscope.dashboards.agents import gap_table

    def row(tenant: str, bucket: str, share: float) -> dict:
        config = {"policy": "lru", "isolation": "shared", "capacity_blocks": 8}
        counts = {"subagent": False, "missed_tokens": 10, "share": share}
        return {"tenant": tenant, **config, "gap_bucket": bucket, **counts}

    mixed = pl.DataFrame([
        row("*", "no session", 0.5), row("*", "first", 0.2), row("*", "<10s", 0.3),
        row("kimi", "no session", 1.0),
        row("agents", "first", 0.4), row("agents", "<10s", 0.6),
    ])  # fmt: skip
    columns, rows = gap_table(mixed)
    assert [r["tenant"] for r in rows] == ["agents"]  # the fleet mixes in a log without sessions
    assert [c[1] for c in columns][2:] == ["first", "<10s", "missed tokens"]
    assert rows[0]["b0"] == "40.0%" and rows[0]["b1"] == "60.0%"
    only_agents = mixed.filter(pl.col("tenant") != "kimi").filter(
        pl.col("gap_bucket") != "no session"
    )
    assert [r["tenant"] for r in gap_table(only_agents)[1]] == ["fleet", "agents"]

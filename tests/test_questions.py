"""docs/questions.md: every query of the page runs against a warehouse built as `make demo` builds
it (``demo_run``, once per session), returns rows, none of its columns all NULL, and answers
its question: each answer checked against the same figure computed another way, or against a
rule it must keep."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from prefixscope.analysis.cost.deployment import memory_split, parse_deployment
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.simulation.scenarios import Settings
from prefixscope.stages import ingest, simulate
from prefixscope.stages.simulate import SimulateSettings
from tests.conftest import REPO, DemoRun, mooncake_line

pytestmark = [pytest.mark.flow, pytest.mark.slow]

PAGE = REPO / "docs" / "questions.md"
#: The capacity most questions ask at: the middle of the flow's grid.
PRICED = 16_000
#: The capacity the flow's savings price: the KV pool of h200x8 serving deepseek-v3.
POOL = memory_split(resolve_model("deepseek-v3"), parse_deployment("h200x8"), block_size=512)


@dataclass(frozen=True)
class Question:
    heading: str
    sql: str


def read_questions(page: Path = PAGE) -> list[Question]:
    """Every ```sql block of the page, under the ``##`` heading it follows."""
    found: list[Question] = []
    heading, block = "", None
    for line in page.read_text().splitlines():
        if block is not None:
            if line == "```":
                found.append(Question(heading, "\n".join(block)))
                block = None
            else:
                block.append(line)
        elif line == "```sql":
            block = []
        elif line.startswith("## "):
            heading = line[3:]
    assert block is None, f"a ```sql block under {heading!r} is not closed"
    return found


QUESTIONS = read_questions()


def query(words: str) -> str:
    """The query of the one question whose heading holds ``words``."""
    (found,) = [q.sql for q in QUESTIONS if words in q.heading]
    return found


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.fixture(scope="module")
def demo(demo_run: DemoRun) -> Path:
    assert demo_run.returncode == 0, demo_run.stdout
    return demo_run.warehouse


@pytest.fixture
def con(demo: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    with duckdb.connect(str(demo), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        yield con


@pytest.fixture
def demo_copy(demo: Path, tmp_path: Path) -> Path:
    """A copy of the demo warehouse that a test may write to."""
    return Path(shutil.copy(demo, tmp_path / "demo.duckdb"))


def test_the_page_asks_at_least_twelve_questions_one_query_each() -> None:
    headings = [q.heading for q in QUESTIONS]
    assert len(headings) >= 12
    assert len(set(headings)) == len(headings), "a question with two queries"
    numbered = [re.match(r"(\d+)\. .+\?$", h) for h in headings]
    assert all(numbered), headings
    assert [int(m.group(1)) for m in numbered if m] == list(range(1, len(headings) + 1))


def test_the_demo_warehouse_is_in_a_format_the_duckdb_command_line_reads(demo: Path) -> None:
    """The file header's storage version (after the 8-byte checksum and ``DUCK``): DuckDB 1.4's
    (67), which the DuckDB command line reads from 1.4 on (1.5 reads 64 to 68), not the Python
    driver's newest."""
    header = demo.read_bytes()[:20]
    assert header[8:12] == b"DUCK"
    assert int.from_bytes(header[12:20], "little") == 67


#: The DuckDB command line (the ``duckdb-cli`` package of the test extra), in this environment.
CLI = Path(sys.executable).parent / "duckdb"


def cli_rows(wh: Path, sql: str) -> list[dict[str, Any]]:
    """``sql`` run by the DuckDB command line, read-only, its rows as JSON; fails on an error."""
    done = subprocess.run(
        [str(CLI), "-readonly", "-json", str(wh), "-c", sql], capture_output=True, text=True
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return json.loads(done.stdout or "[]")


def test_the_duckdb_command_line_answers_every_view_and_question(
    demo: Path, con: duckdb.DuckDBPyConnection
) -> None:
    """What an operator types: the command line of DuckDB's last release line opens the demo
    warehouse read-only, every view answers, and every query of the page returns what the
    project's own driver returns."""
    views = [r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1"
    ).fetchall()]  # fmt: skip
    assert len(views) >= 10
    for name in views:
        quoted = '"' + name.replace('"', '""') + '"'
        cli_rows(demo, f"SELECT count(*) AS n FROM {quoted}")
    for q in QUESTIONS:
        assert len(cli_rows(demo, q.sql)) == len(rows(con, q.sql)), q.heading


@pytest.mark.parametrize("question", QUESTIONS, ids=[q.heading.split(".")[0] for q in QUESTIONS])
def test_each_query_returns_rows_and_no_column_all_null(
    con: duckdb.DuckDBPyConnection, question: Question
) -> None:
    found = rows(con, question.sql)
    assert found, question.heading
    empty = [name for name in found[0] if all(r[name] is None for r in found)]
    assert not empty, f"{question.heading}: all NULL: {empty}"


def test_the_trace_is_the_demos(con: duckdb.DuckDBPyConnection) -> None:
    (row,) = rows(con, query("What does the warehouse hold"))
    assert (row["requests"], row["files"], row["tenants"]) == (15_887, 3, 5)
    assert row["rejected_lines"] == 0 and row["block_sizes"] == "512"
    assert row["unique_blocks"] <= row["block_lookups"]


def test_the_eviction_loss_is_the_ceiling_minus_lru_from_the_hit_tokens(
    con: duckdb.DuckDBPyConnection,
) -> None:
    found = rows(con, query("lose most to eviction"))
    # the same loss from the table: each tenant's ceiling and lru hit tokens of the latest run
    expected = dict(
        con.execute(
            """
            SELECT l.tenant, (c.hit_tokens - l.hit_tokens) / l.input_tokens
            FROM hit_rates l
            JOIN hit_rates c
              ON c.run_id = l.run_id AND c.tenant = l.tenant AND c.isolation = l.isolation
             AND c.measure_window = l.measure_window AND c.policy = 'ceiling'
            WHERE l.run_id = (SELECT max(run_id) FROM runs WHERE command = 'simulate')
              AND l.policy = 'lru' AND l.isolation = 'shared' AND l.measure_window = 'all'
              AND l.capacity_blocks = ?
            """,
            [PRICED],
        ).fetchall()
    )
    tenants = ["*", "agent", "chat", "claude-code", "kimi", "search"]
    assert sorted(r["tenant"] for r in found) == sorted(expected) == tenants
    for r in found:
        assert 0 <= r["lost_to_eviction"] <= 1 and 0 <= r["share_of_ceiling_lost"] <= 1
        assert r["lost_to_eviction"] == pytest.approx(expected[r["tenant"]], abs=1e-4)
        assert r["lru"] + r["lost_to_eviction"] == pytest.approx(r["ceiling"], abs=2e-4)
    losses = [r["lost_to_eviction"] for r in found]
    assert losses == sorted(losses, reverse=True)
    assert found[0]["tenant"] == "kimi"


def test_twice_the_capacity_never_loses_and_the_curve_is_the_simulators(
    con: duckdb.DuckDBPyConnection,
) -> None:
    found = rows(con, query("twice the capacity"))
    simulated = {
        (tenant, blocks): rate
        for tenant, blocks, rate in con.execute(
            "SELECT tenant, capacity_blocks, token_hit_rate FROM latest_hit_rates "
            "WHERE policy = 'lru' AND isolation = 'shared' AND measure_window = 'all'"
        ).fetchall()
    }
    assert len(found) == 6  # the fleet and five tenants
    for r in found:
        assert (r["capacity_blocks"], r["twice_blocks"]) == (PRICED, 2 * PRICED)
        assert r["gain"] >= 0  # LRU keeps what a smaller LRU cache keeps
        assert r["hit_rate"] == pytest.approx(simulated[r["tenant"], PRICED], abs=5e-5)
        assert r["twice_hit_rate"] == pytest.approx(simulated[r["tenant"], 2 * PRICED], abs=5e-5)


def test_belady_bounds_lru_at_every_capacity(con: duckdb.DuckDBPyConnection) -> None:
    found = rows(con, query("offline optimum"))
    capacities = [r["capacity_blocks"] for r in found]
    assert capacities == sorted([1000 * 2**k for k in range(8)] + [POOL.kv_pool_blocks])
    for r in found:
        assert r["lru"] <= r["belady"] <= r["ceiling"]
        assert r["gap"] >= 0 and 0 < r["lru_share_of_belady"] <= 1
    assert found[-1]["gap"] < found[0]["gap"]


def test_the_steady_rate_lies_in_its_interval_and_covers_the_rest_of_the_trace(
    con: duckdb.DuckDBPyConnection,
) -> None:
    found = rows(con, query("once the cache is warm"))
    (total,) = con.execute("SELECT requests FROM trace_summary").fetchall()[0]
    for r in found:
        assert r["steady_ci_low"] <= r["steady"] <= r["steady_ci_high"]
    fleet = found[0]
    assert fleet["tenant"] == "*"
    assert fleet["steady_from_request"] + fleet["steady_requests"] == total
    assert sum(r["steady_requests"] for r in found[1:]) == fleet["steady_requests"]


def test_sharing_adds_up_over_tenants_and_never_hurts_an_unbounded_cache(
    con: duckdb.DuckDBPyConnection,
) -> None:
    found = rows(con, query("sharing one cache"))
    for policy in ("ceiling", "lru"):
        mine = {r["tenant"]: r for r in found if r["policy"] == policy}
        assert len(mine) == 6
        fleet = mine.pop("*")["sharing_gains_tokens"]
        assert fleet == sum(r["sharing_gains_tokens"] for r in mine.values())
        for r in mine.values():
            assert r["sharing_gains_tokens"] == r["shared_hit_tokens"] - r["salted_hit_tokens"]
            if policy == "ceiling":  # an unbounded shared cache holds every salted hit
                assert r["sharing_gains_tokens"] >= 0


def test_cross_tenant_hits_are_what_the_structure_run_attributes_to_other_tenants(
    con: duckdb.DuckDBPyConnection,
) -> None:
    found = rows(con, query("other tenants put in the cache"))
    others = dict(
        con.execute(
            "SELECT tenant, other_tenant_tokens FROM latest_hit_sources "
            "WHERE policy = 'lru' AND capacity_blocks = ?",
            [PRICED],
        ).fetchall()
    )
    for r in found:
        assert 0 <= r["cross_tenant_hit_tokens"] <= r["hit_tokens"] <= r["input_tokens"]
        assert 0 <= r["share_of_hits"] <= 1
        assert r["cross_tenant_hit_tokens"] == others[r["tenant"]]
    fleet, *tenants = found
    assert fleet["tenant"] == "*"
    assert fleet["cross_tenant_hit_tokens"] == sum(r["cross_tenant_hit_tokens"] for r in tenants)
    assert fleet["cross_tenant_hit_tokens"] > 0
    ((salted,),) = con.execute(
        "SELECT sum(cross_tenant_hit_tokens) FROM latest_hit_rates WHERE isolation = 'salted'"
    ).fetchall()
    assert salted == 0


def test_the_best_router_at_8_replicas_comes_first(con: duckdb.DuckDBPyConnection) -> None:
    found = rows(con, query("best hit rate at 8 replicas"))
    assert {r["router"] for r in found} == {
        "round-robin",
        "random",
        "session",
        "least-loaded",
        "cache-aware",
        "kv-aware",
    }
    ((best,),) = con.execute(
        "SELECT max(token_hit_rate) FROM latest_fleet_hit_rates WHERE tenant = '*' "
        "AND replicas = 8 AND load_scale = 1 AND measure_window = 'all'"
    ).fetchall()
    assert found[0]["hit_rate"] == pytest.approx(best, abs=5e-5)
    for r in found:
        assert r["hit_rate"] <= r["ceiling"]
        assert r["ttft_p50_s"] <= r["ttft_p95_s"] and r["load_imbalance"] >= 1


def test_the_plans_lru_answer_is_where_the_curve_crosses_the_target(
    con: duckdb.DuckDBPyConnection,
) -> None:
    found = rows(con, query("What should we buy"))
    (lru,) = [r for r in found if (r["kind"], r["policy"]) == ("capacity", "lru")]
    assert lru["reached"] and lru["bracket_low_blocks"] < lru["capacity_blocks"]
    ((target,),) = con.execute(
        "SELECT target_token_hit_rate FROM latest_plan WHERE tenant = '*' AND policy = 'lru' "
        "AND kind = 'capacity'"
    ).fetchall()
    ((below, above),) = con.execute(
        """
        SELECT max(token_hit_rate) FILTER (WHERE capacity_blocks <= $low),
               min(token_hit_rate) FILTER (WHERE capacity_blocks >= $answer)
        FROM latest_mrc
        WHERE tenant = '*' AND policy = 'lru' AND isolation = 'shared'
          AND measure_window = 'all'
        """,
        {"low": lru["bracket_low_blocks"], "answer": lru["capacity_blocks"]},
    ).fetchall()
    assert below < target <= above
    for r in found:
        assert not r["reached"] or r["hit_rate"] >= r["target"] - 1e-4
    (fleet,) = [r for r in found if r["kind"] == "configuration"]
    assert fleet["router"] and fleet["replicas"] and fleet["cost_per_hour"] > 0


def test_the_tenants_savings_add_up_to_the_fleets(con: duckdb.DuckDBPyConnection) -> None:
    found = rows(con, query("prefill GPU-seconds"))
    fleet, *tenants = found
    assert fleet["tenant"] == "*" and len(tenants) == 5
    total = sum(r["saved_per_hour"] for r in tenants)
    assert total == pytest.approx(fleet["saved_per_hour"], abs=0.05 * len(found))
    for r in found:
        assert 0 < r["gpu_s_with_cache"] < r["gpu_s_no_cache"]
        # both GPU-second figures are rounded to 0.1: the ratio moves by up to 0.1 / no_cache
        assert r["saved_share"] == pytest.approx(
            1 - r["gpu_s_with_cache"] / r["gpu_s_no_cache"], abs=0.1 / r["gpu_s_no_cache"] + 1e-4
        )
        assert r["ttft_p95_with_cache_s"] <= r["ttft_p95_no_cache_s"]


def test_the_shared_prefixes_come_by_sessions(con: duckdb.DuckDBPyConnection) -> None:
    found = rows(con, query("most sessions share"))
    assert [r["rank"] for r in found] == list(range(1, len(found) + 1))
    sessions = [r["sessions"] for r in found]
    assert sessions == sorted(sessions, reverse=True)
    for r in found:
        assert r["tenants"] == len(r["tenant_names"]) and r["requests"] >= r["sessions"]
        assert r["tokens"] == 512 * r["blocks"]


def test_the_hit_sources_split_the_simulators_hit_tokens(con: duckdb.DuckDBPyConnection) -> None:
    found = rows(con, query("Where do the hits come from"))
    simulated = {
        (tenant, policy, blocks): hits
        for tenant, policy, blocks, hits in con.execute(
            "SELECT tenant, policy, capacity_blocks, hit_tokens FROM latest_hit_rates "
            "WHERE isolation = 'shared' AND measure_window = 'all'"
        ).fetchall()
    }
    assert {r["policy"] for r in found} == {"ceiling", "lru"}
    for r in found:
        parts = r["own_session"] + r["shared_prefix"] + r["other_tenant"]
        assert parts == pytest.approx(1, abs=2e-4)
        assert r["hit_tokens"] == simulated[r["tenant"], r["policy"], r["capacity_blocks"]]


def test_reuse_shares_grow_with_the_time_allowed(con: duckdb.DuckDBPyConnection) -> None:
    found = rows(con, query("used again"))
    for r in found:
        shares = [r["within_10s"], r["within_1m"], r["within_10m"], r["within_1h"]]
        assert shares[0] >= 0 and shares == sorted(shares) and shares[-1] <= 1
    fleet = next(r for r in found if (r["tenant"], r["request_kind"]) == ("*", "*"))
    tenants = [r for r in found if r["tenant"] != "*"]
    assert fleet["reuses"] == sum(r["reuses"] for r in tenants)


def test_the_trend_lists_runs_newest_first(con: duckdb.DuckDBPyConnection, demo_copy: Path) -> None:
    sql = query("over the last runs")
    demo = rows(con, sql)
    assert {(r["policy"], r["isolation"], r["capacity_blocks"]) for r in demo} == {
        ("lru", "shared", POOL.kv_pool_blocks)
    }
    assert len({r["run_id"] for r in demo}) == 1 and demo[0]["tenant"] == "*"
    # a later simulate run of the same configuration, keeping its outcomes, as the next
    # scheduled run would: it comes first
    later = simulate.simulate_policies(
        demo_copy,
        SimulateSettings(
            policies=("lru",),
            capacities=Capacities(blocks=(POOL.kv_pool_blocks,)),
            measure=Settings(windows=("all", "steady"), outcomes=True),
        ),
    ).run_id
    with duckdb.connect(str(demo_copy), read_only=True) as two:
        found = rows(two, sql)
    runs = [r["run_id"] for r in found]
    assert runs == [later] * 6 + [demo[0]["run_id"]] * 6
    assert [r["run_at"] for r in found] == sorted((r["run_at"] for r in found), reverse=True)
    assert [r["tenant"] for r in found[:6]] == [
        "*",
        "agent",
        "chat",
        "claude-code",
        "kimi",
        "search",
    ]


def test_the_rejects_show_per_file_with_their_reasons(
    con: duckdb.DuckDBPyConnection, demo_copy: Path, tmp_path: Path
) -> None:
    sql = query("rejected")
    for r in rows(con, sql):  # the demo rejects nothing, and says so
        assert (r["rejected"], r["reasons"]) == (0, "none")
        assert r["lines"] == r["accepted"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "\n".join(
            [
                mooncake_line(timestamp=0, hash_ids=[10**9, 10**9 + 1]),
                "not json",
                '{"timestamp": 1000, "input_length": 600}',
                "[1, 2]",
                "also not json",
                mooncake_line(timestamp=2000, hash_ids=[10**9, 10**9 + 2]),
            ]
        )
        + "\n"
    )
    assert (
        ingest.ingest_logs(demo_copy, ingest.IngestSettings((str(bad),), "mooncake")).rejected == 4
    )
    with duckdb.connect(str(demo_copy), read_only=True) as after:
        found = {r["path"]: r for r in rows(after, sql)}
    mine = found[str(bad)]
    assert (mine["lines"], mine["accepted"], mine["rejected"]) == (6, 2, 4)
    assert mine["reasons"] == "invalid_json: 2, missing_field: 1, not_an_object: 1"
    assert len(found) == 4

"""Figures that can't mislead: one steady window per run, every row beside its ceiling, and the
last-token rule of token sources."""

from __future__ import annotations

import gzip
import json

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.curves.compute import compute_curves
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.policies import PolicyOptions
from prefixscope.analysis.simulation.grid import simulate_grid
from prefixscope.analysis.simulation.replay import replay
from prefixscope.analysis.simulation.scenarios import Scenario, Settings, scenarios
from prefixscope.analysis.simulation.tables import HIT_RATES_SCHEMA
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.stages.simulate import SimulateSettings, simulate_scenarios
from tests.conftest import SAMPLE
from tests.test_policies import prefix_chains


@pytest.fixture(scope="module")
def bundled() -> Trace:
    """The bundled mooncake trace read straight from its file (no warehouse): timestamps in
    milliseconds, stable order, 512-token blocks, one tenant, no last-token rule."""
    with gzip.open(SAMPLE, "rt") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    lines.sort(key=lambda d: d["timestamp"])
    return build_trace(
        [d["hash_ids"] for d in lines],
        [d["input_length"] for d in lines],
        ["default"] * len(lines),
        512,
        times=[d["timestamp"] / 1000 for d in lines],
    )


POLICIES = ["ceiling", "lru", "fifo", "lfu", "s3fifo", "belady"]
WINDOWS = ("all", "last-half", "steady")


def assert_below_ceiling(rows: list[dict]) -> None:
    for r in rows:
        if r["input_tokens"]:
            assert r["ceiling_token_hit_rate"] is not None, r
            assert r["hit_tokens"] / r["input_tokens"] <= r["ceiling_token_hit_rate"] + 1e-12, r
        if r["token_hit_rate"] is not None:
            assert r["token_hit_rate"] <= r["ceiling_token_hit_rate"] + 1e-12, r


def assert_one_window(rows: list[dict], n: int) -> int:
    steady = [r for r in rows if r["measure_window"] == "steady"]
    starts = {r["warmup_requests"] for r in steady}
    assert len(starts) == 1, starts
    [start] = starts
    fleet = [r for r in steady if r["tenant"] == "*"]
    assert {r["requests"] for r in fleet} == {n - start}
    own = [r["own_warmup_requests"] for r in steady if r["steady"]]
    assert all(o is not None and o <= start for o in own)
    assert own and max(own) == start or not own and start == n
    assert all(r["own_warmup_requests"] is None for r in steady if not r["steady"])
    return start


def test_bundled_steady_rows_share_one_window_under_the_ceiling(bundled: Trace) -> None:
    grid = scenarios(POLICIES, [16_000, 128_000], ["shared"])
    rows = simulate_grid(bundled, grid, Settings(windows=WINDOWS)).hit_rates
    assert_below_ceiling(rows)
    start = assert_one_window(rows, bundled.n_requests)
    steady = {
        (r["policy"], r["capacity_blocks"]): r
        for r in rows
        if r["measure_window"] == "steady" and r["tenant"] == "*"
    }
    ceiling = steady[("ceiling", None)]
    assert ceiling["token_hit_rate"] == ceiling["ceiling_token_hit_rate"]
    for r in steady.values():  # one window: one ceiling figure
        assert r["warmup_requests"] == start
        assert r["ceiling_token_hit_rate"] == ceiling["token_hit_rate"]


@settings(max_examples=40, deadline=None)
@given(
    requests=prefix_chains(n_roots=4, max_requests=40),
    tenants=st.lists(st.sampled_from(["a", "b", "c"]), min_size=40, max_size=40),
    caps=st.lists(st.integers(1, 30), min_size=1, max_size=3, unique=True),
    mode=st.sampled_from(["shared", "salted", "partitioned"]),
    whole=st.booleans(),
    token_source=st.booleans(),
)
def test_no_row_sits_above_its_ceiling(requests, tenants, caps, mode, whole, token_source) -> None:
    bs = 4
    tokens = [len(r) * bs - (0 if whole else i % bs) for i, r in enumerate(requests)]
    trace = build_trace(
        requests,
        [max(1, t) for t in tokens],
        tenants[: len(requests)],
        bs,
        last_token_rule=[token_source] * len(requests),
    )
    grid = scenarios(POLICIES, caps, [mode])
    rows = simulate_grid(trace, grid, Settings(windows=WINDOWS)).hit_rates
    assert_below_ceiling(rows)
    assert_one_window(rows, trace.n_requests)


def test_a_cache_that_never_fills_does_not_push_the_window() -> None:
    trace = build_trace([[i, i + 1000] for i in range(300)] * 2, [8] * 600, ["t"] * 600, 4)
    small, huge = Scenario("lru", 50), Scenario("lru", 100_000)
    rows = simulate_grid(trace, [small, huge], Settings(windows=("steady",))).hit_rates
    by_cap = {r["capacity_blocks"]: r for r in rows if r["tenant"] == "*"}
    alone = simulate_grid(trace, [small], Settings(windows=("steady",))).hit_rates[0]
    assert by_cap[50]["warmup_requests"] == alone["warmup_requests"] == alone["own_warmup_requests"]
    assert by_cap[100_000]["steady"] is False and by_cap[100_000]["token_hit_rate"] is None
    assert by_cap[100_000]["own_warmup_requests"] is None
    assert by_cap[100_000]["warmup_requests"] == by_cap[50]["warmup_requests"]
    # none filled: nothing is measured
    none = simulate_grid(trace, [huge], Settings(windows=("steady",))).hit_rates
    assert none[0]["warmup_requests"] == trace.n_requests and none[0]["requests"] == 0


def test_fanned_out_rows_equal_in_process_rows(bundled: Trace) -> None:
    grid = scenarios(["lru", "fifo", "ceiling"], [4_000, 64_000], ["shared"])
    measure = Settings(windows=WINDOWS)
    here = simulate_scenarios(bundled, grid, measure, SimulateSettings(workers=1))
    there = simulate_scenarios(bundled, grid, measure, SimulateSettings(workers=2))
    assert here.hit_rates == there.hit_rates
    assert here.timeseries == there.timeseries
    assert pa.Table.from_pylist(here.hit_rates, schema=HIT_RATES_SCHEMA).num_rows == len(
        here.hit_rates
    )


# --- the last-token rule ---------------------------------------------------------------------


def test_a_fully_hit_whole_block_prompt_recomputes_its_last_block() -> None:
    hashes, bs = [[1, 2, 3], [1, 2, 3], [1, 2, 3, 4]], 4
    for rule, want in [(True, [0, 2, 3]), (False, [0, 3, 3])]:
        tokens = [12, 12, 17]  # whole-block, whole-block, a partial tail (not hashed)
        trace = build_trace(hashes, tokens, ["t"] * 3, bs, last_token_rule=[rule] * 3)
        for policy, cap in [("ceiling", None), ("lru", 10), ("fifo", 10)]:
            out = replay(trace, policy, cap, PolicyOptions())
            assert out.hit_blocks.tolist() == want, (rule, policy)
            assert hit_tokens(trace, out.hit_blocks).tolist() == [b * bs for b in want]
    # one block, fully hit: no hit at all under the rule
    trace = build_trace([[7], [7]], [4, 4], ["t"] * 2, 4, last_token_rule=[True, True])
    rows = simulate_grid(trace, [Scenario("lru", 4)], Settings()).hit_rates
    assert rows[0]["hit_tokens"] == 0 and rows[0]["hit_requests"] == 0


def test_the_rule_is_keyed_on_the_source_format() -> None:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE r AS SELECT * FROM (VALUES "
        "('a', 't', 8, [1, 2]::UBIGINT[], TIMESTAMPTZ '2026-01-01', 'mooncake', 'f', 1),"
        "('b', 't', 8, [1, 2]::UBIGINT[], TIMESTAMPTZ '2026-01-02', 'bailian', 'f', 2),"
        "('c', 't', 8, [1, 2]::UBIGINT[], TIMESTAMPTZ '2026-01-03', 'openai', 'f', 3),"
        "('d', 't', 8, [1, 2]::UBIGINT[], TIMESTAMPTZ '2026-01-04', 'tokens', 'f', 4)"
        ") v(request_id, tenant, input_tokens, block_hashes, arrival_ts, format, file, line)"
    )
    con.execute(
        "CREATE TABLE requests AS SELECT * EXCLUDE (file, line), "
        "{'file': file, 'line': line} AS source, 4 AS block_size FROM r"
    )
    trace = load_trace(con)
    assert trace.recomputes_last_block.tolist() == [False, False, True, True]
    assert trace.servable_tokens.tolist() == [8, 8, 4, 4]


@settings(max_examples=40, deadline=None)
@given(
    requests=prefix_chains(n_roots=3, max_requests=40),
    tenants=st.lists(st.sampled_from(["a", "b"]), min_size=40, max_size=40),
)
def test_the_lru_curve_follows_the_rule_to_the_token(requests, tenants) -> None:
    bs = 4
    trace = build_trace(
        requests,
        [len(r) * bs + (i % 3 == 0) for i, r in enumerate(requests)],  # mostly whole blocks
        tenants[: len(requests)],
        bs,
        last_token_rule=[True] * len(requests),
    )
    caps = list(range(1, trace.n_unique + 2))
    table = compute_curves(
        trace, CurveSettings(windows=("all", "last-half"), capacities=tuple(caps))
    )
    curve = {
        (r["measure_window"], r["tenant"], r["capacity_blocks"]): r["hit_tokens"]
        for r in table.to_pylist()
    }
    rows = simulate_grid(
        trace, scenarios(["lru"], caps, ["shared"]), Settings(windows=("all", "last-half"))
    ).hit_rates
    for r in rows:
        assert curve[(r["measure_window"], r["tenant"], r["capacity_blocks"])] == r["hit_tokens"]
    assert np.all(trace.servable_tokens <= trace.input_tokens)

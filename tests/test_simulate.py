"""Simulation on the bundled trace and on small traces: figures, windows, tenants, storage."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.simulation.capacities import Capacities, capacities_in_blocks
from prefixscope.analysis.simulation.grid import simulate_grid
from prefixscope.analysis.simulation.scenarios import Scenario, Settings, scenarios
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.load import REPLAY_ORDER
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.stages import simulate
from prefixscope.stages.simulate import SimulateSettings
from tests.conftest import Bundled, mooncake_line
from tests.oracles.policies import reference_hit_blocks


@pytest.fixture(scope="module")
def bundled_requests(bundled_warehouse: Bundled) -> list[list[int]]:
    """The bundled trace's block hashes, request by request in replay order."""
    with warehouse.connect(bundled_warehouse.path, read_only=True) as con:
        rows = con.execute(f"SELECT block_hashes FROM requests ORDER BY {REPLAY_ORDER}").fetchall()
    return [r[0] for r in rows]


def test_bundled_ceiling_matches_the_published_prefix_hit_rate(bundled_trace: Trace) -> None:
    trace = bundled_trace
    table = (
        simulate_grid(trace, [Scenario("ceiling", None)], Settings(windows=tuple(["all"])))
        .arrow()[0]
        .to_pylist()
    )
    fleet = next(r for r in table if r["tenant"] == "*")
    assert fleet["requests"] == 12_031 and fleet["input_tokens"] == 144_793_823
    assert fleet["token_hit_rate"] == pytest.approx(0.3736, abs=5e-4)


@pytest.mark.parametrize("capacity", [1_000, 20_000, 100_000])
def test_bundled_lru_matches_the_python_reference(
    bundled_trace: Trace, bundled_requests: list[list[int]], capacity: int
) -> None:
    want = reference_hit_blocks("lru", bundled_requests, capacity)
    assert POLICIES["lru"].hit_blocks(bundled_trace, capacity).tolist() == want


def test_bundled_lru_rises_with_capacity_towards_the_ceiling(bundled_trace: Trace) -> None:
    trace = bundled_trace
    caps = [500, 2_000, 8_000, 32_000, 128_000, trace.n_unique]
    table = (
        simulate_grid(trace, scenarios(["ceiling", "lru"], caps), Settings(windows=tuple(["all"])))
        .arrow()[0]
        .to_pylist()
    )
    fleet = [r for r in table if r["tenant"] == "*"]
    ceiling = next(r["token_hit_rate"] for r in fleet if r["policy"] == "ceiling")
    lru = [r["token_hit_rate"] for r in fleet if r["policy"] == "lru"]
    assert lru == sorted(lru) and lru[0] < 0.1
    assert lru[-1] == pytest.approx(ceiling, abs=1e-12)


def test_bundled_belady_is_at_least_lru_at_every_capacity(bundled_trace: Trace) -> None:
    trace = bundled_trace
    for capacity in (500, 2_000, 8_000, 32_000, 128_000):
        lru = POLICIES["lru"].hit_blocks(trace, capacity)
        belady = POLICIES["belady"].hit_blocks(trace, capacity)
        lru_tokens = hit_tokens(trace, lru).sum()
        assert hit_tokens(trace, belady).sum() >= lru_tokens >= 0, capacity


def test_partial_last_block_counts_its_own_tokens() -> None:
    # Block size 4: a request of 10 tokens has blocks of 4, 4, 2 tokens.
    trace = build_trace([[1, 2, 3], [1, 2, 3], [1, 2, 4]], [10, 10, 11], ["t"] * 3, 4)
    hits = POLICIES["ceiling"].hit_blocks(trace, None)
    assert hits.tolist() == [0, 3, 2]
    assert hit_tokens(trace, hits).tolist() == [0, 10, 8]


def test_token_sources_never_serve_the_unhashed_tail() -> None:
    # Block size 4, floor-hashed: 10 tokens have two hashed blocks and a 2-token tail; a 3-token
    # prompt has no block at all.
    trace = build_trace([[1, 2], [1, 2], [], [1]], [10, 10, 3, 7], ["t"] * 4, 4)
    hits = POLICIES["ceiling"].hit_blocks(trace, None)
    assert hits.tolist() == [0, 2, 0, 1]
    assert hit_tokens(trace, hits).tolist() == [0, 8, 0, 4]


def test_windows_tenants_and_the_fleet_add_up() -> None:
    requests = [[0, 1], [0, 2], [5, 6], [0, 1], [5, 6], [0, 2], [5, 7], [0, 1]]
    tenants = ["a", "a", "b", "a", "b", "a", "b", "a"]
    trace = build_trace(requests, [8] * 8, tenants, 4)
    table = (
        simulate_grid(
            trace, [Scenario("ceiling", None)], Settings(windows=tuple(["all", "last-half"]))
        )
        .arrow()[0]
        .to_pylist()
    )
    for window, n in (("all", 8), ("last-half", 4)):
        rows = [r for r in table if r["measure_window"] == window]
        fleet = next(r for r in rows if r["tenant"] == "*")
        parts = [r for r in rows if r["tenant"] != "*"]
        assert fleet["requests"] == n
        for col in ("requests", "input_tokens", "hit_tokens", "hit_requests"):
            assert fleet[col] == sum(r[col] for r in parts)
    last_half = {r["tenant"]: r for r in table if r["measure_window"] == "last-half"}
    # Positions 4..7: b [5,6] full hit, a [0,2] full, b [5,7] one block, a [0,1] full.
    assert last_half["a"]["hit_tokens"] == 16 and last_half["b"]["hit_tokens"] == 12
    assert last_half["*"]["token_hit_rate"] == pytest.approx(28 / 32)


@pytest.mark.parametrize(
    ("blocks", "tokens", "want"),
    [([10, 20], None, [10, 20]), (None, [512, 1_000, 5_120], [1, 1, 10])],
)
def test_capacity_in_tokens_holds_whole_blocks(blocks, tokens, want) -> None:
    assert capacities_in_blocks(512, blocks, tokens) == want


@pytest.mark.parametrize(
    ("policies", "caps", "error"),
    [
        (["nope"], [1], "unknown policy"),
        (["lru"], [], "needs at least one capacity"),
        (["lru"], [0], "at least one block"),
    ],
)
def test_bad_scenarios_fail_with_a_message(policies, caps, error) -> None:
    with pytest.raises(ValueError, match=error):
        scenarios(policies, caps)


def test_the_simulate_stage_records_its_run_and_rows(wh, write_lines) -> None:
    path, con = wh
    src = write_lines([mooncake_line(timestamp=i, hash_ids=[100, i % 3]) for i in range(9)])
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        ingest_files(con, [src], "mooncake", IngestOptions(tenant="acme"), run_id)
    con.close()
    result = simulate.simulate_policies(
        path, SimulateSettings(("ceiling", "lru"), Capacities(tokens=[1024, 4096]))
    )
    assert [(s.policy, s.capacity_blocks) for s in result.grid] == [
        ("ceiling", None),
        ("lru", 2),
        ("lru", 8),
    ]
    con = warehouse.connect(path, read_only=True)
    rows = con.execute(
        "SELECT tenant, policy, capacity_blocks, capacity_tokens, requests, hit_tokens "
        "FROM hit_rates ORDER BY policy, capacity_blocks, tenant"
    ).fetchall()
    assert rows == [
        # ceiling: the 2nd and 3rd requests hit their root block, the last six hit whole
        ("*", "ceiling", None, None, 9, 2 * 512 + 6 * 600),
        ("acme", "ceiling", None, None, 9, 2 * 512 + 6 * 600),
        # two blocks: the root stays, each leaf evicts the previous one
        ("*", "lru", 2, 1024, 9, 8 * 512),
        ("acme", "lru", 2, 1024, 9, 8 * 512),
        ("*", "lru", 8, 4096, 9, 2 * 512 + 6 * 600),
        ("acme", "lru", 8, 4096, 9, 2 * 512 + 6 * 600),
    ]
    ((command, params, status),) = con.execute(
        "SELECT command, parameters, status FROM runs WHERE command = 'simulate'"
    ).fetchall()
    assert status == "succeeded" and json.loads(params)["capacities"]["tokens"] == [1024, 4096]
    assert con.execute("SELECT DISTINCT run_id FROM hit_rates").fetchall() == [(result.run_id,)]
    con.close()


def test_a_warehouse_without_requests_says_so(tmp_path) -> None:
    path = tmp_path / "wh.duckdb"
    with warehouse.connect(path):  # an empty warehouse (a missing one is refused before this)
        pass
    with pytest.raises(ValueError, match="no requests"):
        simulate.simulate_policies(path, SimulateSettings(("ceiling",)))
    with warehouse.connect(path, read_only=True) as con:
        assert con.execute("SELECT command, status FROM runs").fetchall() == [
            ("simulate", "failed")
        ]
        assert np.int64(0) == con.execute("SELECT count(*) FROM hit_rates").fetchone()[0]


@pytest.mark.parametrize("seed", range(5))
def test_cross_tokens_sum_the_served_tokens_of_the_lookups_that_crossed(seed: int) -> None:
    """The compiled per-request sum equals its definition: every lookup flagged as crossing
    tenants adds the tokens it serves (a whole-block prompt's last block of a token source
    serves none), requests without lookups add nothing."""
    from prefixscope.analysis.policies import Outcome
    from prefixscope.analysis.simulation.grid import cross_tokens

    rng = np.random.default_rng(seed)
    requests = [list(rng.integers(0, 30, rng.integers(0, 9))) for _ in range(60)]
    tokens = [max(1, len(r) * 4 - int(rng.integers(0, 4))) for r in requests]
    trace = build_trace(requests, tokens, [f"t{i % 3}" for i in range(60)], 4)
    cross = rng.random(trace.n_lookups) < 0.4
    outcome = Outcome(np.zeros(trace.n_requests, np.int32), cross, -1)
    want = np.bincount(
        trace.request_of_lookup,
        weights=np.where(cross, trace.served_sizes, 0),
        minlength=trace.n_requests,
    )
    assert cross_tokens(trace, outcome).tolist() == want.astype(np.int64).tolist()

"""Structure: turn inference, shared prefixes, hit attribution, first new blocks, reuse times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.structure import attribution, firstnew, pins, prefixes, reuse, turns
from prefixscope.analysis.structure.tables import StructureSettings
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest, simulate, structure
from prefixscope.stages.simulate import SimulateSettings
from prefixscope.synthetic import Workload, write_bailian
from tests.conftest import mooncake_line

BS = 4


def chained(contents: list[list[int]]) -> list[list[int]]:
    """Prefix-chained ids from per-block contents: equal ids mean equal prefixes."""
    ids: dict[tuple[int, ...], int] = {}
    return [
        [ids.setdefault(tuple(c[: i + 1]), len(ids) + 1) for i in range(len(c))] for c in contents
    ]


def trace_of(contents, tokens, tenants=None):  # type: ignore[no-untyped-def]
    tenants = tenants or ["t"] * len(contents)
    return build_trace(chained(contents), tokens, tenants, BS)


# --- turn inference: the rules, case by case --------------------------------------------------

SYSTEM = [1, 2]  # a two-block shared prompt
CASES = {
    # name: (block contents, input tokens, tenants, expected parents)
    "a turn re-sends the last one and grows": ([[1, 2, 3], [1, 2, 4, 5]], [10, 16], None, [-1, 0]),
    "a re-sent prompt is not its own turn": ([[1, 2, 3], [1, 2, 3]], [10, 10], None, [-1, -1]),
    "another tenant is never a parent": ([[1, 2, 3], [1, 2, 4, 5]], [10, 16], "ab", [-1, -1]),
    "the deepest match wins": ([[1], [1, 2], [1, 2, 3]], [4, 8, 12], None, [-1, 0, 1]),
    "the latest of equals wins": ([[1, 2], [1, 2], [1, 2, 3]], [8, 8, 12], None, [-1, -1, 1]),
    "a partial last block need not match": ([[1, 2, 3], [1, 2, 9]], [9, 12], None, [-1, 0]),
    "a prompt too short for a full block has no child": ([[1], [1, 2]], [3, 8], None, [-1, -1]),
    "a shared system prompt is nobody's parent": (
        [SYSTEM + [3], SYSTEM + [10, 11], SYSTEM + [20, 21], SYSTEM + [30, 31]],
        [9, 16, 16, 16],
        None,
        [-1, -1, -1, -1],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_inferred_parents_follow_the_rules(name: str) -> None:
    contents, tokens, tenants, want = CASES[name]
    trace = trace_of(contents, tokens, list(tenants) if tenants else None)
    parent, _ = turns.infer_parents(trace)
    assert parent.tolist() == want


def test_turns_and_sessions_follow_the_parents() -> None:
    trace = trace_of([[1, 2, 3], [7], [1, 2, 4, 5], [1, 2, 4, 5, 6]], [10, 4, 16, 20])
    t = turns.build_turns(trace)
    assert t.parent.tolist() == [-1, -1, 0, 2]
    assert t.turn.tolist() == [1, 1, 2, 3]
    assert t.session.tolist() == [0, 1, 0, 0]
    assert t.parent_inferred.all() and t.history_blocks.tolist() == [0, 0, 2, 4]


@st.composite
def traces(draw):  # type: ignore[no-untyped-def]
    """Random requests over a small alphabet (so prefixes repeat), with partial last blocks."""
    n = draw(st.integers(1, 30))
    contents = draw(
        st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=6), min_size=n, max_size=n)
    )
    tokens = [len(c) * BS - draw(st.integers(0, BS - 1)) for c in contents]
    tenants = draw(st.lists(st.sampled_from("ab"), min_size=n, max_size=n))
    return trace_of(contents, tokens, tenants)


@settings(max_examples=150, deadline=None)
@given(trace=traces(), max_forks=st.integers(1, 4))
def test_an_inferred_parent_is_an_earlier_shorter_request_of_the_tenant_ending_in_a_leading_run(
    trace, max_forks
) -> None:
    parent, shared = turns.infer_parents(trace, max_forks)
    full = turns.full_blocks(trace)
    t = turns.build_turns(trace, max_forks=max_forks)
    for b, a in enumerate(parent.tolist()):
        if a < 0:
            assert t.turn[b] == 1 and t.session[b] == b
            continue
        assert a < b and trace.tenant_codes[a] == trace.tenant_codes[b]
        assert trace.input_tokens[a] < trace.input_tokens[b]
        mine = trace.blocks[trace.offsets[b] : trace.offsets[b + 1]]
        theirs = trace.blocks[trace.offsets[a] : trace.offsets[a] + full[a]]
        assert full[a] >= 1 and shared[b] == full[a]
        assert mine[: full[a]].tolist() == theirs.tolist()
        assert t.turn[b] == t.turn[a] + 1 and t.session[b] == t.session[a]


# --- against logs with known conversations ----------------------------------------------------


@pytest.fixture(scope="module")
def bailian_wh(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """A synthetic Bailian log (four tenants by type, shared system prompts, interleaved
    sessions, edited turns, common first messages), ingested, simulated and analysed."""
    tmp = tmp_path_factory.mktemp("bailian")
    path = write_bailian(tmp / "log.jsonl", Workload(sessions=200), seed=7)
    db = tmp / "wh.duckdb"
    options = IngestOptions(tenant_from="type")
    ingest.ingest_logs(db, ingest.IngestSettings((str(path),), "bailian", options))
    simulate.simulate_policies(db, SimulateSettings(("ceiling", "lru"), Capacities(blocks=[3_000])))
    result = structure.find_structure(db, StructureSettings(capacity_blocks=3_000, simulate_top=3))
    assert sorted(result.tables) == sorted(
        ("turns", "session_stats", "shared_prefixes", "hit_sources", "first_new_blocks",
         "reuse_times", "agent_sessions")
    )  # fmt: skip
    assert result.tables["agent_sessions"].num_rows == 0  # Bailian names no session
    return db


def test_inferred_links_match_the_logged_ones(bailian_wh: Path) -> None:
    # benchmarks/turn_inference.py measures 0.999 / 0.995 on 3 × 400 sessions (docs).
    with warehouse.connect(bailian_wh, read_only=True) as con:
        rows = con.execute(
            "SELECT tenant, logged_links, inferred_links, inference_precision, "
            "inference_recall FROM session_stats"
        ).fetchall()
        logged = con.execute(
            "SELECT bool_and(NOT parent_inferred AND NOT turn_inferred AND NOT session_inferred)"
            " FROM turns"
        ).fetchone()[0]
    assert logged  # the log names every turn, so nothing is inferred in `turns`
    fleet = next(r for r in rows if r[0] == "*")
    assert fleet[1] > 300
    assert fleet[3] >= 0.98 and fleet[4] >= 0.95
    assert len(rows) == 1 + 4


def test_hit_sources_add_up_to_the_simulated_hit_tokens(bailian_wh: Path) -> None:
    with warehouse.connect(bailian_wh, read_only=True) as con:
        rows = con.execute(
            "SELECT s.tenant, s.policy, s.hit_tokens, h.hit_tokens, "
            "s.own_session_tokens + s.shared_prefix_tokens + s.other_tenant_tokens, "
            "s.other_tenant_tokens, h.cross_tenant_hit_tokens "
            "FROM hit_sources s JOIN hit_rates h ON h.tenant = s.tenant AND h.policy = s.policy "
            "AND h.capacity_blocks IS NOT DISTINCT FROM s.capacity_blocks "
            "AND h.measure_window = 'all'"
        ).fetchall()
    assert len(rows) == 2 * 5
    for _tenant, _policy, mine, simulated, parts, other, cross in rows:
        assert mine == simulated == parts and other == cross
    assert any(r[5] > 0 for r in rows)  # the shared preamble crosses tenants


@settings(max_examples=100, deadline=None)
@given(trace=traces(), capacity=st.integers(1, 12), policy=st.sampled_from(["ceiling", "lru"]))
def test_every_hit_block_is_in_exactly_one_class(trace, capacity, policy) -> None:
    outcome = POLICIES[policy].replay(
        trace, None if policy == "ceiling" else capacity, PolicyOptions()
    )
    session = turns.build_turns(trace).session
    split = attribution.split_tokens(trace, session, outcome)
    assert split.sum(axis=1).tolist() == hit_tokens(trace, outcome.hit_blocks).tolist()
    cls = attribution.classify(trace, session, outcome)
    # A first turn has no history of its own.
    first = np.flatnonzero(session == np.arange(trace.n_requests))
    assert not np.isin(trace.request_of_lookup[cls == 0], first).any()


# --- shared prefixes and pins -----------------------------------------------------------------


def test_the_top_shared_prefix_is_the_system_prompt_and_pin_top_agrees() -> None:
    # 12 sessions of two turns each open with a 3-block prompt; one 5-block prompt is shared
    # by many turns of a single session only.
    contents, tokens = [], []
    for s in range(12):
        contents += [[1, 2, 3, 100 + s], [1, 2, 3, 100 + s, 200 + s]]
        tokens += [16, 20]
    for k in range(6):
        contents.append([50, 51, 52, 53, 54] + list(range(60, 61 + k)))
        tokens.append(4 * len(contents[-1]))
    trace = trace_of(contents, tokens)
    session = turns.build_turns(trace).session
    ranking = prefixes.rank(trace, session)
    top = ranking.ends[0]
    assert trace.hashes[top] == chained(contents)[0][2] and ranking.sessions[0] == 12
    assert ranking.requests[0] == 24
    assert prefixes.uses(trace, ranking.ends[:1])[0].tokens == 12
    assert sorted(np.flatnonzero(pins.top_shared(trace, 1)).tolist()) == sorted(
        np.flatnonzero(pins.with_ancestors(trace, np.array([top]))).tolist()
    )


# --- first new blocks and reuse times ---------------------------------------------------------


@pytest.mark.parametrize(
    ("second_block", "spike"),
    [("unique", True), ("shared", False)],
)
def test_a_unique_block_early_in_every_prompt_reads_as_a_spike(second_block, spike) -> None:
    # 40 requests: a shared first block, then either a per-request block (a timestamp in the
    # system prompt) or a shared one, then 30 blocks of which the first 20 are shared.
    contents = []
    for i in range(40):
        second = 1000 + i if second_block == "unique" else 7
        contents.append([5, second] + list(range(20)) + [2000 + i] * 10)
    trace = trace_of(contents, [4 * len(c) for c in contents])
    position = firstnew.first_new(trace)
    rows = [
        b.__dict__ for b in firstnew.histogram(trace, position, np.ones(trace.n_requests, bool))
    ]
    assert sum(r["requests"] for r in rows) == 40
    text = firstnew.finding(rows, BS, early_tokens=16)
    assert text.startswith("Spike near the start") is spike
    if spike:  # 39 of 40 requests break at block 1; 124 of their 128 tokens are new
        assert "98% of requests" in text and "at block 1 " in text
        assert f"{39 * 124 / (40 * 128):.1%} of input tokens" in text


def test_reuse_shares_from_sql_match_the_gaps(bailian_wh: Path) -> None:
    with warehouse.connect(bailian_wh, read_only=True) as con:
        ((run_id,),) = con.execute("SELECT run_id FROM runs WHERE command = 'structure'").fetchall()
        shares = con.execute(
            "SELECT tenant, request_kind, reuses, within_10s, within_1m, within_10m, within_1h "
            "FROM reuse_shares WHERE run_id = ?",
            [run_id],
        ).fetchall()
        gaps = reuse.reuses(load_trace(con)).gap_s
    fleet = next(r for r in shares if r[0] == "*" and r[1] == "*")
    assert fleet[2] == len(gaps)
    for got, limit in zip(fleet[3:], reuse.WITHIN_S, strict=True):
        assert got == pytest.approx(np.mean(gaps <= limit))


def test_structure_from_the_command_line(tmp_path: Path, write_lines, capsys) -> None:
    wh = tmp_path / "wh.duckdb"
    lines = [
        mooncake_line(timestamp=i * 1000, input_length=1500, hash_ids=[1, 2, 10 + i])
        for i in range(5)
    ]
    assert main(["ingest", "--format", "mooncake", "--input", str(write_lines(lines)),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    assert main(["structure", "--warehouse", str(wh), "--capacity-blocks", "4"]) == 0
    out = capsys.readouterr().out
    assert "5 requests in 5 sessions" in out and "shared prefix #1: 1,024 tokens" in out
    with warehouse.connect(wh, read_only=True) as con:
        runs = con.execute("SELECT command, status FROM runs ORDER BY started_at").fetchall()
        counts = [con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in
                  ("turns", "session_stats", "shared_prefixes", "hit_sources")]  # fmt: skip
    assert runs[-1] == ("structure", "succeeded") and counts == [5, 2, 1, 4]

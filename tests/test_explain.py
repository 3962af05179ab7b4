"""``prefixscope explain``: per block of one request, its last use, stack depth and why it hit
or missed; the leading hits always equal the policy's own replay (``simulate``)."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest

from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.structure.explain import explain, recency
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.cli import main
from prefixscope.stages import explain as stage
from prefixscope.stages import simulate, structure
from prefixscope.synthetic import Workload, bailian_lines


def make_trace(requests, tenants=None, times=None) -> Trace:  # type: ignore[no-untyped-def]
    return build_trace(
        requests, [4 * len(r) for r in requests], tenants or ["t"] * len(requests), 4, times
    )


@cache
def generated() -> tuple[Trace, np.ndarray]:
    """A multi-tenant conversation trace (ids chained here) and its true session per request."""
    lines = bailian_lines(Workload(sessions=250, block_size=64, preamble_tokens=130), seed=3)
    chained: dict[tuple[int, ...], int] = {}
    requests = []
    for line in lines:
        ids = line["hash_ids"]
        requests.append(
            [chained.setdefault(tuple(ids[: i + 1]), len(chained)) for i in range(len(ids))]
        )
    root: dict[int, int] = {}
    for line in lines:
        parent = line["parent_chat_id"]
        root[line["chat_id"]] = line["chat_id"] if parent < 0 else root[parent]
    trace = build_trace(
        requests,
        [line["input_length"] for line in lines],
        [line["type"] for line in lines],
        64,
        times=[line["timestamp"] for line in lines],
    )
    return trace, np.array([root[line["chat_id"]] for line in lines], np.int64)


def brute_depths(requests: list[list[int]], r: int) -> list[int]:
    """Stack depth off its definition: walk the touches before ``r`` (each request deepest
    first), most recent first, counting distinct blocks until the block itself (0: never)."""
    touches = [b for q in requests[:r] for b in reversed(q)]
    out = []
    for block in requests[r]:
        seen: list[int] = []
        for b in reversed(touches):
            if b not in seen:
                seen.append(b)
            if b == block:
                break
        out.append(len(seen) if block in touches else 0)
    return out


# --- recency ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "depths", "last"),
    [
        # touches: 3 2 1 | 4   -> most recent first: 4 1 2 3
        ([[1, 2, 3], [4], [1, 2, 5]], [2, 3, 0], [0, 0, -1]),
        # touches: 2 1 | 4 3   -> 3 4 1 2
        ([[1, 2], [3, 4], [1, 2]], [3, 4], [0, 0]),
        # a block used again is as recent as its latest use: touches 2 1 | 1 | 9 -> 9 1 2
        ([[1, 2], [1], [9], [1, 2]], [2, 3], [1, 0]),
        # the first request sees nothing
        ([[1, 2]], [0, 0], [-1, -1]),
        # a request repeating a block: both lookups see the same state
        ([[7], [7, 7]], [1, 1], [0, 0]),
    ],
)
def test_depth_and_last_use(requests, depths, last) -> None:
    rec = recency(make_trace(requests), len(requests) - 1)
    assert rec.depth.tolist() == depths == brute_depths(requests, len(requests) - 1)
    assert rec.last_request.tolist() == last


def test_depths_match_their_definition_on_random_traces() -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        requests = [
            [int(b) for b in rng.integers(0, 12, int(rng.integers(0, 6)))] for _ in range(12)
        ]
        trace = make_trace(requests)
        for r in range(len(requests)):
            assert recency(trace, r).depth.tolist() == brute_depths(requests, r)


# --- the leading hits are simulate's ---------------------------------------------------------


def check_against_lru(
    trace: Trace, requests: np.ndarray, capacity: int, session: np.ndarray | None = None
) -> set[str | None]:
    """Every request's explanation agrees with the LRU replay; returns the relations seen."""
    expected = POLICIES["lru"].hit_blocks(trace, capacity)
    relations = set()
    for r in requests.tolist():
        e = explain(trace, r, "lru", capacity, session)
        relations |= {b.last_by for b in e.blocks}
        assert e.hit_blocks == expected[r], r
        for b in e.blocks:
            assert b.hit == (b.position < e.hit_blocks)
            assert b.cached == (b.depth is not None and b.depth <= capacity)
            if b.reason == "hit":
                assert b.cached
            elif b.reason == "evicted":
                assert b.depth > capacity and b.position == e.hit_blocks
            elif b.reason == "never seen":
                assert b.depth is None and b.last_request is None
            else:
                assert b.reason == "after the first miss" and b.position > e.hit_blocks
    return relations


@pytest.mark.parametrize("capacity", [64, 1_500, 12_000])
def test_bundled_trace_leading_hits_equal_the_lru_replay(bundled_trace, capacity) -> None:
    picks = np.random.default_rng(capacity).integers(0, bundled_trace.n_requests, 120)
    check_against_lru(bundled_trace, picks, capacity)


@pytest.mark.parametrize("capacity", [20, 300, 3_000])
def test_generated_multi_tenant_trace_leading_hits_equal_the_lru_replay(capacity) -> None:
    trace, session = generated()
    assert len(trace.tenants) == 4
    relations = check_against_lru(trace, np.arange(0, trace.n_requests, 3), capacity, session)
    assert relations == {None, "same session", "other session", "other tenant"}


@pytest.mark.parametrize("policy", ["ceiling", "fifo", "lfu", "s3fifo", "belady", "ttl", "pinned"])
def test_other_policies_take_hits_from_their_own_replay(policy) -> None:
    trace, _ = generated()
    options = PolicyOptions(ttl_s=120.0, pinned=np.zeros(trace.n_unique, bool))
    capacity = None if policy == "ceiling" else 400
    expected = POLICIES[policy].hit_blocks(trace, capacity, options)
    for r in range(1, trace.n_requests, 17):
        e = explain(trace, r, policy, 400, options=options)
        assert e.hit_blocks == expected[r]
        first = e.first_miss
        if first is not None:
            assert first.cached is False and first.reason in ("never seen", "evicted", "expired")
        for b in e.blocks:
            if b.last_request is None:
                assert b.cached is False
            elif b.position > e.hit_blocks:
                assert b.cached is (True if policy == "ceiling" else None)


# --- why, and by whom --------------------------------------------------------------------------


def test_reasons_and_relations_on_a_small_trace() -> None:
    #   r0 tenant a, session 0: 1 2 3
    #   r1 tenant b           : 1 8
    #   r2 tenant a, session 1: 1 2 9
    #   r3 tenant a, session 0: 1 2 3 4     <- explained at capacity 4
    # touches: 3 2 1 | 8 1 | 9 2 1  -> most recent first: 1 2 9 8 3
    trace = make_trace([[1, 2, 3], [1, 8], [1, 2, 9], [1, 2, 3, 4]], ["a", "b", "a", "a"])
    session = np.array([0, -1, 1, 0])
    e = explain(trace, 3, "lru", 4, session)
    got = [(b.reason, b.depth, b.last_request, b.last_by) for b in e.blocks]
    assert got == [
        ("hit", 1, 2, "other session"),
        ("hit", 2, 2, "other session"),
        ("evicted", 5, 0, "same session"),
        ("after the first miss", None, None, None),
    ]
    assert e.hit_blocks == 2 and e.hit_tokens == 8 and e.first_miss is e.blocks[2]
    # at capacity 5 block 3 is cached, and the miss moves to block 3; without sessions the
    # same tenant is all that can be said, and another tenant is another tenant
    e = explain(trace, 3, "lru", 5)
    assert [b.reason for b in e.blocks] == ["hit", "hit", "hit", "never seen"]
    assert {b.last_by for b in e.blocks[:3]} == {"same tenant"}
    assert explain(trace, 2, "lru", 4, session).blocks[0].last_by == "other tenant"


def test_blocks_after_the_first_miss_are_misses_even_when_cached() -> None:
    # ids that are not chained: touches 2 1 | 6 5 2 -> most recent first 2 5 6 1, so at a
    # capacity of 3 block 1 is gone and block 2 is still there, one place behind the miss
    trace = make_trace([[1, 2], [2, 5, 6], [1, 2]])
    e = explain(trace, 2, "lru", 3)
    assert [(b.hit, b.cached, b.reason) for b in e.blocks] == [
        (False, False, "evicted"),
        (False, True, "after the first miss"),
    ]


def test_a_block_idle_longer_than_the_ttl_expired() -> None:
    trace = make_trace([[1, 2], [1, 3], [1, 2]], times=[0.0, 50.0, 100.0])
    options = PolicyOptions(ttl_s=60.0)
    e = explain(trace, 2, "ttl", 100, options=options)
    assert e.hit_blocks == 1 and e.blocks[1].reason == "expired" and e.blocks[1].last_ago_s == 100.0
    e = explain(trace, 2, "ttl", 2, options=PolicyOptions(ttl_s=1000.0))
    assert e.blocks[1].reason == "evicted"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope", 5), "unknown policy"),
        (("lru", None), "needs a capacity"),
        (("fifo", 0), "needs a capacity"),
    ],
)
def test_bad_configurations_are_value_errors(args, message) -> None:
    with pytest.raises(ValueError, match=message):
        explain(make_trace([[1], [1]]), 1, *args)


# --- the command -------------------------------------------------------------------------------


def test_explain_command_on_the_bundled_trace(bundled_warehouse, bundled_trace, capsys) -> None:
    rid = bundled_trace.request_ids[6000].as_py()
    argv = ["explain", "--warehouse", str(bundled_warehouse.path), "--request", rid]
    assert main([*argv, "--capacity-blocks", "4000"]) == 0
    out = capsys.readouterr().out.splitlines()
    n = int(bundled_trace.blocks_per_request[6000])
    hits = int(POLICIES["lru"].hit_blocks(bundled_trace, 4000)[6000])
    assert out[0].startswith(f"request {rid}: tenant default, session -,")
    assert "lru at 4,000 blocks (--capacity-blocks)" in out[1]
    assert "none: the log has no session_id" in out[2]
    shown = min(n, 20)  # a terminal table's rows (prefixscope/terminal.py), then the count
    rows = out[5 : 5 + shown]
    assert [r.split()[0] for r in rows] == [str(i) for i in range(shown)]
    assert sum(r.split()[2] == "hit" for r in rows) == min(hits, shown)  # hits lead
    assert n <= 20 or out[5 + shown].startswith(f"… {n - shown} more blocks: ")
    assert out[-1].startswith(f"summary: {hits} of {n} blocks hit")

    assert main([*argv, "--capacity-blocks", "4000", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hit_blocks"] == hits and len(doc["blocks"]) == n
    assert (
        doc["blocks"][0]["block_hash"]
        == f"{int(bundled_trace.hashes[bundled_trace.blocks[bundled_trace.offsets[6000]]]):016x}"
    )


def test_capacity_and_sessions_come_from_what_the_warehouse_holds(
    bundled_warehouse, bundled_trace, tmp_path
) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    rid = bundled_trace.request_ids[7000].as_py()
    with pytest.raises(ValueError, match="give --capacity-blocks"):
        stage.explain_requests(wh, stage.ExplainSettings(rid))
    structure.find_structure(wh, structure.StructureSettings(capacity_blocks=3_000, simulate_top=0))
    got = stage.explain_requests(wh, stage.ExplainSettings(rid))
    assert got.explanation.capacity_blocks == 3_000 and "structure" in got.capacity_from
    assert "turns (inferred from the block chains)" in got.sessions_from and got.session
    assert {b.last_by for b in got.explanation.blocks} <= {None, "same session", "other session"}

    from prefixscope.analysis.simulation.capacities import Capacities

    simulate.simulate_policies(
        wh, simulate.SimulateSettings(("fifo",), Capacities(blocks=[100, 900, 5_000, 7_000]))
    )
    got = stage.explain_requests(wh, stage.ExplainSettings(rid, policy="fifo"))
    assert got.explanation.capacity_blocks == 900  # the lower middle of four
    assert got.capacity_from == "the middle of the 4 capacities simulated for fifo"
    got = stage.explain_requests(wh, stage.ExplainSettings(rid, policy="ceiling"))
    assert got.explanation.capacity_blocks is None and got.capacity_from is None


def test_a_log_request_id_names_its_request(tmp_path) -> None:
    from prefixscope.stages import ingest
    from prefixscope.synthetic import write_bailian

    log = write_bailian(tmp_path / "b.jsonl", Workload(sessions=20), seed=1)
    wh = tmp_path / "wh.duckdb"
    ingest.ingest_logs(wh, ingest.IngestSettings((str(log),), "bailian"))
    got = stage.explain_requests(wh, stage.ExplainSettings("7", capacity_blocks=100))
    assert got.request_id.endswith(":8")  # chat_id 7 is line 8
    with pytest.raises(ValueError, match="no request 'x' in the warehouse — give a request_id"):
        stage.explain_requests(wh, stage.ExplainSettings("x", capacity_blocks=100))


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--request", "nope", "--capacity-blocks", "9"], "no request 'nope' in the warehouse"),
        (["--request", "{first}"], "no capacity is stored in the warehouse"),
        (["--request", "{first}", "--policy", "ttl", "--capacity-blocks", "9"], "--ttl"),
    ],
)
def test_user_errors_are_one_line(bundled_warehouse, bundled_trace, capsys, extra, needle) -> None:
    first = bundled_trace.request_ids[0].as_py()
    argv = ["explain", "--warehouse", str(bundled_warehouse.path)]
    status = main([*argv, *(a.replace("{first}", first) for a in extra)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("prefixscope explain: error: ") and needle in err and " — " in err

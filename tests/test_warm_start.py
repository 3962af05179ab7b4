"""A warm start (``trace/warm.py``): the caches begin as the engine's captured events left them
(or after the trace's first window), replayed and never measured. On a log whose first half the
engine served before the capture's trace begins, the events' warm start raises the first
window's hit rate and leaves the steady window's within the cold run's interval, for one cache
and for a fleet; the warm-up's rows never reach a table."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope import synthetic_events as se
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.trace.warm import (
    LEAD_S,
    WarmStart,
    first_window,
    parse_warm_start,
    with_blocks,
)
from prefixscope.analysis.validate.events import (
    CLEARED_KIND,
    REMOVED_KIND,
    STORED_KIND,
    EngineStream,
    engine_cache,
)
from prefixscope.cli import main
from prefixscope.pipelines.flow_parameters import FlowParameters
from prefixscope.pipelines.parameters import check

CAPACITY = 3_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cold", WarmStart()),
        ("events", WarmStart("events")),
        ("first-window:600", WarmStart("first-window", 600.0)),
        (" first-window:0.5 ", WarmStart("first-window", 0.5)),
    ],
)
def test_a_warm_start_is_read(text: str, expected: WarmStart) -> None:
    assert parse_warm_start(text) == expected


@pytest.mark.parametrize(
    "text", ["hot", "", "first-window", "first-window:", "first-window:-1", "first-window:0",
             "first-window:nan", "first-window:inf", "events:3", "cold:1"],
)  # fmt: skip
def test_what_is_no_warm_start_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_warm_start(text)


def _trace():  # type: ignore[no-untyped-def]
    return build_trace([[10, 11, 12], [10, 13], [20]], [48, 32, 16], ["a", "b", "a"], 16,
                       times=[5.0, 6.0, 9.0])  # fmt: skip


def test_the_blocks_go_first_and_the_trace_is_measured_as_it_was() -> None:
    trace = _trace()
    warmed = with_blocks(trace, np.array([13, 99, 10], np.uint64))
    assert warmed.n_warm == 3 and warmed.trace.n_requests == 6
    t = warmed.trace
    assert t.hashes[t.blocks[:3]].tolist() == [13, 99, 10]
    assert t.times[:3].tolist() == [-LEAD_S] * 3 and t.times[3:].tolist() == trace.times.tolist()
    # a block the trace names keeps its parent; one it does not is new and has none
    np.testing.assert_array_equal(t.parent[: trace.n_unique], trace.parent)
    assert t.parent[trace.n_unique :].tolist() == [-1]
    m = warmed.measured
    for name in ("offsets", "input_tokens", "tenant_codes", "times"):
        np.testing.assert_array_equal(getattr(m, name), getattr(trace, name), err_msg=name)
    np.testing.assert_array_equal(m.hashes[m.blocks], trace.hashes[trace.blocks])


def test_the_unbounded_cache_from_warm_blocks_is_the_seen_leading_run() -> None:
    """Brute force: each request's hit is its leading run of blocks seen before, the warm
    blocks included."""
    trace = _trace()
    warm = [13, 10, 20]
    warmed = with_blocks(trace, np.array(warm, np.uint64))
    got = POLICIES["ceiling"].hit_blocks(warmed.trace, None)[warmed.n_warm :]
    seen, want = set(warm), []
    for hashes in ([10, 11, 12], [10, 13], [20]):
        k = 0
        while k < len(hashes) and hashes[k] in seen:
            k += 1
        want.append(k)
        seen.update(hashes)
    assert got.tolist() == want == [1, 2, 1]
    assert hit_tokens(warmed.measured, got).tolist() == [16, 32, 16]


def test_a_first_window_is_the_requests_before_it() -> None:
    trace = _trace()  # arrivals 0, 1 and 4 s after the first
    assert first_window(trace, 1.0).n_warm == 1
    assert first_window(trace, 1.5).n_warm == 2
    assert first_window(trace, 1.5).measured.n_requests == 1
    with pytest.raises(ValueError, match="nothing would be left to measure"):
        first_window(trace, 4.5)


def _stream(events: list[tuple[float, int, int, bool]]) -> EngineStream:
    t, kind, block, linked = (np.array(x) for x in zip(*events, strict=True))
    return EngineStream(t.astype(float), kind.astype(np.int8), block.astype(np.uint64),
                        linked.astype(bool), block.astype(np.int64))  # fmt: skip


def test_the_engine_cache_is_what_its_events_left_by_last_store() -> None:
    s, r, c = STORED_KIND, REMOVED_KIND, CLEARED_KIND
    rank0 = _stream([(1, s, 7, True), (2, s, 8, True), (3, s, 9, False), (4, s, 7, True),
                     (5, r, 8, True), (50, s, 5, True)])  # fmt: skip
    rank1 = _stream([(1, s, 6, True), (2, c, 0, True), (3.5, s, 4, True)])
    held = engine_cache({0: rank0, 1: rank1}, at=10.0).tolist()
    # 9 has no prefixscope id: an id of its own, stored at 3; 7 re-stored at 4 is newest of
    # rank 0; rank 1's clear dropped 6; 5 comes after the trace began
    assert held[0] not in (4, 5, 6, 7, 8, 9) and held[1:] == [4, 7]
    assert engine_cache({0: rank0}, at=0.5).tolist() == []


@pytest.fixture(scope="module")
def served_before(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """An engine that served a log's first half, then its second half, its events captured
    throughout; the warehouse holds the second half's requests and every event."""
    tmp = tmp_path_factory.mktemp("warm")
    w = se.Workload(requests=1_200, rate_per_s=4.0)
    log = se.make_log(w)
    run = se.run_engine(log, se.Engine(capacity_blocks=CAPACITY, jitter_sigma=0.0), w.block_size)
    se.write_log(log[len(log) // 2 :], tmp / "log.jsonl")
    se.write_capture([run], tmp / "events.bin", "map")
    wh = tmp / "wh.duckdb"
    assert main(["ingest", "--format", "tokens", "--input", str(tmp / "log.jsonl"),
                 "--output-tokens-field", "output_tokens",
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    assert main(["ingest", "--format", "vllm-events", "--input", str(tmp / "events.bin"),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    return wh


def _rows(wh: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_events_warm_a_cache_early_and_leave_its_steady_state(served_before: Path, capsys) -> None:
    wh = str(served_before)
    for start in ("cold", "events"):
        assert main(["simulate", "--warehouse", wh, "--policy", "lru", "--capacity-blocks",
                     str(CAPACITY), "--window", "all,steady", "--bucket", "30s",
                     "--warm-start", start]) == 0  # fmt: skip
    assert "warm start events:" in capsys.readouterr().out
    rates = {
        (start, window): (rate, lo, hi, n)
        for start, window, rate, lo, hi, n in _rows(
            served_before,
            "SELECT warm_start, measure_window, token_hit_rate, ci_low, ci_high, requests "
            "FROM hit_rates WHERE tenant = '*'",
        )
    }
    # the same requests measured; the warm-up's never
    assert rates["cold", "all"][3] == rates["events", "all"][3] == 600
    first = dict(_rows(served_before, "SELECT h.warm_start, t.token_hit_rate FROM "
                       "hit_rate_timeseries t JOIN hit_rates h USING (run_id) WHERE t.tenant = '*' "
                       "AND h.tenant = '*' AND h.measure_window = 'all' QUALIFY row_number() "
                       "OVER (PARTITION BY t.run_id ORDER BY t.bucket_start) = 1"))  # fmt: skip
    assert first["events"] > first["cold"] + 0.05
    _, lo, hi, _ = rates["cold", "steady"]
    assert lo <= rates["events", "steady"][0] <= hi
    (warm,) = _rows(served_before, "SELECT DISTINCT warm_requests FROM hit_rates WHERE "
                    "warm_start = 'events'")  # fmt: skip
    assert 0 < warm[0] <= CAPACITY


def test_events_warm_a_fleet_and_its_budget_still_adds_up(served_before: Path) -> None:
    from prefixscope.stages import fleet

    def run(start: WarmStart):  # type: ignore[no-untyped-def]
        return fleet.simulate_fleets(served_before, fleet.FleetSettings(
            routers=("kv-aware",), replicas=(2,), windows=("all",), warm_start=start,
            capacities=Capacities(blocks=[CAPACITY // 2]),
        ))  # fmt: skip

    cold_run, warm_run = run(WarmStart()), run(WarmStart("events"))
    (cold_o,), (warm_o,) = cold_run.outcomes, warm_run.outcomes
    assert len(warm_o.hit_tokens) == len(cold_o.hit_tokens) == 600
    assert warm_o.hit_tokens[:60].sum() > cold_o.hit_tokens[:60].sum()
    budget = warm_run.budget.to_pylist()
    whole = [r for r in budget if r["tenant"] == "*"]
    assert sum(r["tokens"] for r in whole) == whole[0]["input_tokens"]
    fleet_row = next(r for r in warm_run.hit_rates.to_pylist() if r["tenant"] == "*")
    assert fleet_row["warm_start"] == "events" and fleet_row["warm_requests"] > 0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"warm_start": "events", "isolations": ("shared", "salted")}, "--isolation shared"),
        ({"warm_start": "first-window:x"}, "first-window:SECONDS"),
    ],
)
def test_the_flow_refuses_a_warm_start_it_cannot_run(tmp_path, values, message) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "log.jsonl"
    log.write_text('{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [1]}\n')
    params = FlowParameters(inputs=(str(log),), warehouse_path=str(tmp_path / "w.duckdb"),
                            report_path=str(tmp_path / "r.html"), **values)  # fmt: skip
    with pytest.raises(ValueError, match=message):
        check(params)

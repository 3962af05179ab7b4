"""Agent sessions (``structure``'s ``agent_sessions``): lifetimes, duty cycles, gaps, tool-call
loops and sub-agents on hand-made sessions, and the table through the stage."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from prefixscope.analysis.structure.agents import agent_sessions
from prefixscope.cli import main
from prefixscope.dashboards.agents import distribution_rows
from prefixscope.dashboards.views import read_view


def requests(session: str, rows: list[tuple], tenant: str = "t", parent: str | None = None):  # type: ignore[no-untyped-def]
    """``rows``: (arrival s, api_time s or None, stop, model) of one session."""
    return [
        {"request_id": f"{session}:{i}", "tenant": tenant, "session_id": session,
         "parent_session_id": parent, "model": model, "stop_reason": stop,
         "api_time_s": api, "arrival_us": int(at * 1e6)}
        for i, (at, api, stop, model) in enumerate(rows)
    ]  # fmt: skip


def table(rows: list[dict]) -> pa.Table:
    schema = pa.schema(
        [("request_id", pa.string()), ("tenant", pa.string()), ("session_id", pa.string()),
         ("parent_session_id", pa.string()), ("model", pa.string()),
         ("stop_reason", pa.string()), ("api_time_s", pa.float64()), ("arrival_us", pa.int64())]
    )  # fmt: skip
    return pa.Table.from_pylist(rows, schema)


def one(rows: list[dict], **kw) -> dict:  # type: ignore[no-untyped-def]
    (got,) = agent_sessions(table(rows), **kw).to_pylist()
    return got


@pytest.mark.parametrize(
    ("rows", "lifetime", "busy", "duty", "gaps"),
    [
        # three requests 10 s apart, each 2 s of server time: 22 s alive, 6 s busy
        ([(0, 2, "tool_use", "m"), (10, 2, "tool_use", "m"), (20, 2, "end_turn", "m")],
         22.0, 6.0, 6 / 22, (10.0, 10.0)),
        # one request: alive as long as it is busy
        ([(5, 3, "end_turn", "m")], 3.0, 3.0, 1.0, (None, None)),
        # no api_time at all: busy and duty unknown, the lifetime from arrivals alone
        ([(0, None, "", "m"), (30, None, "", "m"), (90, None, "", "m")],
         90.0, None, None, (45.0, 57.0)),
        # the trace's own times overlap: the duty cycle is capped at 1
        ([(0, 50, "tool_use", "m"), (1, 50, "end_turn", "m")], 51.0, 100.0, 1.0, (1.0, 1.0)),
    ],
)  # fmt: skip
def test_lifetime_busy_time_duty_cycle_and_gaps(rows, lifetime, busy, duty, gaps) -> None:
    got = one(requests("s", rows))
    assert got["lifetime_s"] == pytest.approx(lifetime)
    assert got["busy_s"] == (None if busy is None else pytest.approx(busy))
    assert got["duty_cycle"] == (None if duty is None else pytest.approx(duty))
    assert (got["median_gap_s"], got["p90_gap_s"]) == tuple(
        None if g is None else pytest.approx(g) for g in gaps
    )
    assert got["duty_cycle"] is None or 0 < got["duty_cycle"] <= 1


@pytest.mark.parametrize(
    ("rows", "loops", "in_loops", "longest"),
    [
        # tool_use, then the result 1 s after the answer: one loop of three
        ([(0, 2, "tool_use", "m"), (3, 2, "tool_use", "m"), (6, 2, "end_turn", "m")], 1, 3, 3),
        # the user thought for 5 minutes after the tool call: no loop
        ([(0, 2, "tool_use", "m"), (302, 2, "end_turn", "m")], 0, 0, 0),
        # an end_turn breaks a run: two loops of two
        ([(0, 1, "tool_use", "m"), (2, 1, "end_turn", "m"), (100, 1, "tool_use", "m"),
          (102, 1, "end_turn", "m")], 2, 4, 2),
        # idle time counts from the request's end: 30 s of api_time, 5 s idle, still a loop
        ([(0, 30, "tool_use", "m"), (35, 1, "end_turn", "m")], 1, 2, 2),
        # no api_time: idle from the arrival, 12 s > 10 s
        ([(0, None, "tool_use", "m"), (12, None, "end_turn", "m")], 0, 0, 0),
    ],
)  # fmt: skip
def test_tool_call_loops(rows, loops, in_loops, longest) -> None:
    got = one(requests("s", rows))
    assert (got["tool_loops"], got["tool_loop_requests"], got["longest_tool_loop"]) == (
        loops, in_loops, longest,
    )  # fmt: skip


def test_the_loop_gap_is_a_setting() -> None:
    rows = requests("s", [(0, None, "tool_use", "m"), (12, None, "end_turn", "m")])
    assert one(rows, loop_gap_s=15.0)["tool_loops"] == 1


def test_sub_agents_are_counted_with_their_models_and_tenants_kept_apart() -> None:
    rows = [
        *requests("c", [(0, 1, "tool_use", "opus"), (50, 1, "end_turn", "opus")]),
        *requests("c/a", [(10, 1, "end_turn", "haiku")], parent="c"),
        *requests("c/b", [(20, 1, "end_turn", "haiku"), (21, 1, "end_turn", "opus")], parent="c"),
        *requests("c", [(0, 1, "end_turn", "opus")], tenant="u"),  # the same name elsewhere
    ]
    got = {(r["tenant"], r["session"]): r for r in agent_sessions(table(rows)).to_pylist()}
    parent = got[("t", "c")]
    assert (parent["subagents"], parent["subagent_models"], parent["models"]) == (
        2, "haiku,opus", "opus",
    )  # fmt: skip
    assert got[("t", "c/b")]["parent_session"] == "c" and got[("t", "c/b")]["subagents"] == 0
    assert got[("u", "c")]["subagents"] == 0 and got[("u", "c")]["requests"] == 1
    assert sum(r["requests"] for r in got.values()) == len(rows)


def test_no_session_no_rows() -> None:
    assert agent_sessions(table([])).num_rows == 0


def test_structure_writes_the_sessions_and_the_page_rows(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    def req(t, ids, stop="tool_use", model="opus"):  # type: ignore[no-untyped-def]
        return {"t": t, "type": "s", "model": model, "in": 4 * len(ids) + 1, "out": 3,
                "hash_ids": ids, "stop": stop, "api_time": 1.0, "think_time": 0.0}  # fmt: skip

    folder = tmp_path / "traces"
    folder.mkdir()
    for c in range(3):
        reqs = [req(2.0 * k, list(range(1, 3 + k))) for k in range(4)]
        reqs.append({"t": 3.0, "type": "subagent", "agent_id": "a1",
                     "requests": [req(0.0, [1, 2], "end_turn", "haiku")]})  # fmt: skip
        body = {"id": f"c{c}", "block_size": 4, "requests": reqs}
        (folder / f"c{c}.json").write_text(json.dumps(body))
    wh = tmp_path / "wh.duckdb"
    common = ["--warehouse", str(wh)]
    assert main(["ingest", "--format", "agent-json", "--input", str(folder), *common]) == 0
    assert main(["structure", *common]) == 0
    out = capsys.readouterr().out
    assert "3 agent sessions and 3 sub-agents, 15 requests" in out
    with duckdb.connect(str(wh), read_only=True) as con:
        sessions = read_view(con, "latest_agent_sessions")
    assert sessions.height == 6 and sessions["requests"].sum() == 15
    rows = {r["measure"]: r for r in distribution_rows(sessions)}
    assert rows["requests"]["max"] == "4" and rows["sub-agents"]["max"] == "1"
    assert rows["duty cycle (busy / lifetime)"]["p50"].endswith("%")
    page = tmp_path / "report.html"
    assert main(["report", *common, "--out", str(page)]) == 0
    html = page.read_text()
    assert 'id="agent-sessions"' in html and "tool-call loops" in html

"""Coding-agent traces (``--format agent-json``): containers, sessions, model keying, arrival
placement, regrouped blocks and every reject with its reason."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.load import load_trace
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.ingest.formats.arrival import Arrival
from prefixscope.ingest.loader import FormatMismatch


def ingest(con, paths, **options):  # type: ignore[no-untyped-def]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        return ingest_files(con, paths, "agent-json", IngestOptions(**options), run_id)


def request(t, ids, model="opus", n_in=None, **extra):  # type: ignore[no-untyped-def]
    """A request of ``len(ids)`` full 4-token blocks and a 1-token tail."""
    n_in = 4 * len(ids) + 1 if n_in is None else n_in
    return {"t": t, "type": "s", "model": model, "in": n_in, "out": 7, "hash_ids": ids,
            "stop": "tool_use", "api_time": 1.5, "think_time": 0.5, **extra}  # fmt: skip


def conversation(cid, requests, scope="local", block_size=4):  # type: ignore[no-untyped-def]
    return {"id": cid, "block_size": block_size, "hash_id_scope": scope, "requests": requests}


def write(folder: Path, conversations: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in conversations.items():
        text = body if isinstance(body, str) else json.dumps(body)
        (folder / name).write_text(text)
    return folder


def rows(con, columns="*"):  # type: ignore[no-untyped-def]
    return con.execute(f"SELECT {columns} FROM requests ORDER BY log_request_id").fetchall()


SUBAGENT = {
    "t": 10.0, "type": "subagent", "agent_id": "agent_001",
    "requests": [request(0.0, [1, 2], model="haiku"), request(3.0, [1, 2, 3], model="haiku")],
}  # fmt: skip


def test_sessions_subagents_and_fields_are_kept(wh, tmp_path) -> None:
    _, con = wh
    folder = write(tmp_path / "t", {"a.json": conversation("c1", [
        request(0.0, [1, 2]), SUBAGENT, request(20.0, [1, 2, 3]),
    ])})  # fmt: skip
    result = ingest(con, [folder], arrival="uniform:10s")
    assert (result.lines, result.accepted, result.rejected) == (4, 4, 0)
    got = rows(con, "log_request_id, session_id, parent_session_id, model, stop_reason, "
                    "api_time_s, think_time_s, len(block_hashes), last_token_rule")  # fmt: skip
    assert got == [
        ("c1#1", "c1", None, "opus", "tool_use", 1.5, 0.5, 2, True),
        ("c1#3", "c1", None, "opus", "tool_use", 1.5, 0.5, 3, True),
        ("c1/agent_001#1", "c1/agent_001", "c1", "haiku", "tool_use", 1.5, 0.5, 2, True),
        ("c1/agent_001#2", "c1/agent_001", "c1", "haiku", "tool_use", 1.5, 0.5, 3, True),
    ]
    # a sub-agent's requests are timed from its start, 10 s into the conversation
    times = dict(con.execute(
        "SELECT log_request_id, epoch(arrival_ts) FROM requests").fetchall())  # fmt: skip
    assert times["c1/agent_001#2"] - times["c1#1"] == pytest.approx(13.0)
    assert times["c1#3"] - times["c1#1"] == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("second_model", "scope", "same_conversation", "hits"),
    [
        ("opus", "local", True, [0, 3]),  # the same model in a conversation: its blocks hit
        ("haiku", "local", True, [0, 0]),  # another model never hits the first's blocks
        ("opus", "local", False, [0, 0]),  # local ids: another conversation's equal ids differ
        ("opus", "global", False, [0, 3]),  # global ids: equal ids are equal blocks
        ("haiku", "global", False, [0, 0]),
    ],
)
def test_blocks_are_keyed_by_model_and_scope(
    wh, tmp_path, second_model, scope, same_conversation, hits
) -> None:
    _, con = wh
    first = request(0.0, [5, 6, 7])
    second = request(1.0, [5, 6, 7, 8], model=second_model)
    if same_conversation:
        body = {"a.json": conversation("c", [first, second], scope)}
    else:
        body = {"a.json": conversation("c", [first], scope),
                "b.json": conversation("d", [{**second, "t": 0.0}], scope)}  # fmt: skip
    # a Poisson placement starts the first conversation by name (a) first
    ingest(con, [write(tmp_path / "t", body)], arrival="poisson:1/h")
    assert POLICIES["ceiling"].hit_blocks(load_trace(con), None).tolist() == hits


def test_the_ceiling_does_not_depend_on_the_arrival_spread(tmp_path, empty_warehouse) -> None:
    rng = np.random.default_rng(3)
    body = {}
    for c in range(12):
        ids: list[int] = []
        reqs = []
        for k in range(int(rng.integers(2, 6))):
            ids = ids + [int(x) for x in rng.integers(0, 50, int(rng.integers(1, 4)))]
            reqs.append(request(5.0 * k, list(ids), model=["opus", "haiku"][c % 2]))
        body[f"c{c:02d}.json"] = conversation(f"c{c}", reqs)
    folder = write(tmp_path / "t", body)
    ceilings = []
    for i, (arrival, seed) in enumerate(
        [("uniform:1h", 0), ("uniform:10s", 4), ("poisson:1/s", 1), ("poisson:2/d", 9)]
    ):
        path = tmp_path / f"w{i}.duckdb"
        shutil.copy(empty_warehouse, path)
        con = duckdb.connect(str(path))
        ingest(con, [folder], arrival=arrival, arrival_seed=seed)
        ceilings.append(int(POLICIES["ceiling"].hit_blocks(load_trace(con), None).sum()))
        con.close()
    assert len(set(ceilings)) == 1 and ceilings[0] > 0


def _archive(kind: str, folder: Path, out: Path) -> Path:
    members = sorted(folder.iterdir())
    if kind == "zip":
        with zipfile.ZipFile(out, "w") as z:
            for m in members:
                z.write(m, f"traces/{m.name}")
    else:
        with tarfile.open(out, "w:gz" if kind == "tar.gz" else "w") as t:
            for m in reversed(members):  # the archive's order is not the names' order
                t.add(m, f"traces/{m.name}")
    return out


@pytest.mark.parametrize("kind", ["zip", "tar.gz", "tar"])
def test_archives_give_what_the_folder_gives(tmp_path, empty_warehouse, kind) -> None:
    folder = write(tmp_path / "t", {
        "a.json": conversation("a", [request(0.0, [1, 2]), request(4.0, [1, 2, 3])]),
        "b.json": conversation("b", [request(0.0, [9]), SUBAGENT]),
        "README.md": "not a conversation",
        ".hidden.json": "not read",
    })  # fmt: skip
    got = []
    for i, path in enumerate([folder, _archive(kind, folder, tmp_path / f"t.{kind}")]):
        wh = tmp_path / f"w{i}.duckdb"
        shutil.copy(empty_warehouse, wh)
        con = duckdb.connect(str(wh))
        result = ingest(con, [path], arrival="uniform:1h", arrival_seed=5)
        assert (result.lines, result.rejected) == (5, 0)
        got.append(con.execute(
            "SELECT log_request_id, arrival_ts, block_hashes FROM requests ORDER BY 1"
        ).fetchall())  # fmt: skip
        con.close()
    assert got[0] == got[1]


def test_a_single_gzip_file_is_one_conversation(wh, tmp_path) -> None:
    _, con = wh
    path = tmp_path / "one.json.gz"
    path.write_bytes(gzip.compress(json.dumps(conversation("x", [request(0.0, [1])])).encode()))
    assert ingest(con, [path]).accepted == 1


@pytest.mark.parametrize(
    ("body", "reason", "rows_of_it"),
    [
        ("{not json", "invalid_json", 1),
        ("[1, 2]", "not_an_object", 1),
        (conversation("c", [request(0, [1])], block_size=0), "out_of_range", 1),
        (conversation("c", [request(0, [1]), request(1, [1])], scope="galaxy"), "out_of_range", 2),
        ({"block_size": 4, "requests": [request(0, [1])]}, "missing_field", 1),
        (
            conversation("c", [{k: v for k, v in request(0, [1]).items() if k != "model"}]),
            "missing_field",
            1,
        ),
        (conversation("c", [request(0, [1], n_in="5")]), "wrong_type", 1),
        (conversation("c", [request(0, [1, True])]), "wrong_type", 1),
        (conversation("c", [request(-1.0, [1])]), "out_of_range", 1),
        (conversation("c", [request(0, [1, -2])]), "out_of_range", 1),
        (conversation("c", [request(0, [1, 2**64])]), "out_of_range", 1),
        (conversation("c", [request(0, [1, 2], n_in=4)]), "block_count_mismatch", 1),
        (conversation("c", [{"t": 1, "type": "subagent"}]), "missing_field", 1),
        (conversation("c", [{**SUBAGENT, "t": "soon"}]), "wrong_type", 1),
        (conversation("c", [request(0, [1], api_time=-3)]), "out_of_range", 1),
        (conversation("c", [request(1e300, [1])]), "timestamp_out_of_range", 1),
    ],
)
def test_every_bad_conversation_or_request_is_a_reject_and_the_counts_add_up(
    wh, tmp_path, body, reason, rows_of_it
) -> None:
    _, con = wh
    good = conversation("g", [request(0.0, [1, 2]), request(2.0, [1, 2, 3])])
    folder = write(tmp_path / "t", {"good.json": good, "bad.json": body})
    result = ingest(con, [folder])
    assert (result.accepted, result.rejected) == (2, rows_of_it)
    assert result.lines == result.accepted + result.rejected
    got = con.execute("SELECT reason, detail FROM rejects").fetchall()
    assert {r for r, _ in got} == {reason}
    assert all(d.startswith("bad.json") for _, d in got)


def _nested(depth: int) -> str:
    """A conversation of a sub-agent holding a request and a sub-agent, ``depth`` times over
    (written by hand: json.dumps itself stops at a few thousand levels)."""
    one = json.dumps(request(0.0, [1]))
    opening = '{"t": 1.0, "type": "subagent", "requests": [' + one + ", "
    inner = '{"t": 1.0, "type": "subagent", "requests": [' + one + "]}"
    body = opening * depth + inner + "]}" * depth
    return '{"id": "b", "block_size": 4, "requests": [' + body + "]}"


@pytest.mark.parametrize(
    ("depth", "accepted", "reason"),
    [(3, 4, None), (40, 16, "out_of_range"), (5000, 0, "invalid_json")],
)
def test_sub_agents_nested_too_deep_are_one_reject(wh, tmp_path, depth, accepted, reason) -> None:
    _, con = wh
    body = {"a.json": conversation("a", [request(0.0, [1, 2])]),
            "b.json": _nested(depth)}  # fmt: skip
    result = ingest(con, [write(tmp_path / "t", body)])
    assert (result.accepted, result.rejected) == (1 + accepted, 0 if reason is None else 1)
    got = {r for (r,) in con.execute("SELECT reason FROM rejects").fetchall()}
    assert got == ({reason} if reason else set())


def test_block_size_regroups_the_traces_blocks(wh, tmp_path) -> None:
    _, con = wh
    folder = write(tmp_path / "t", {"a.json": conversation("a", [
        request(0.0, [1, 2, 3, 4, 5]), request(1.0, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ])})  # fmt: skip
    ingest(con, [folder], block_size=8)  # two 4-token ids a block
    assert rows(con, "block_size, len(block_hashes)") == [(8, 2), (8, 4)]
    assert POLICIES["ceiling"].hit_blocks(load_trace(con), None).tolist() == [0, 2]


def test_a_block_size_the_trace_does_not_divide_is_refused(wh, tmp_path) -> None:
    _, con = wh
    folder = write(tmp_path / "t", {"a.json": conversation("a", [request(0.0, [1, 2])])})
    with pytest.raises(FormatMismatch, match="block_size_mismatch"):
        ingest(con, [folder], block_size=6)


@pytest.mark.parametrize("kind", ["tar.gz", "tar"])
@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.7, 0.9, 0.99])
def test_a_truncated_archive_keeps_what_it_read_and_says_so(
    tmp_path, empty_warehouse, kind, fraction
) -> None:
    """Wherever the cut falls (inside a member, a header or the end blocks), what was read is
    kept and the break is one ``truncated_file`` reject; an archive cut before any whole
    conversation is refused in one line."""
    rng = np.random.default_rng(0)  # ids that do not compress away
    folder = write(tmp_path / "t", {
        f"c{i}.json": conversation(f"c{i}", [request(0.0, rng.integers(0, 2**60, 400).tolist())])
        for i in range(6)
    })  # fmt: skip
    whole = _archive(kind, folder, tmp_path / f"t.{kind}").read_bytes()
    cut = tmp_path / f"cut.{kind}"
    cut.write_bytes(whole[: int(len(whole) * fraction)])
    path = tmp_path / "w.duckdb"
    shutil.copy(empty_warehouse, path)
    with duckdb.connect(str(path)) as con:
        try:
            result = ingest(con, [cut])
        except FormatMismatch as exc:
            assert "truncated_file" in str(exc)
            return
        reasons = dict(con.execute("SELECT reason, count(*) FROM rejects GROUP BY 1").fetchall())
    if kind == "tar" and result.accepted == 6:  # the cut fell in the zeros after the end blocks
        assert reasons == {} and result.lines == 6
        return
    assert reasons == {"truncated_file": 1} and 0 < result.accepted < 6
    assert result.lines == result.accepted + 1


@pytest.mark.parametrize("kind", ["tar.gz", "zip"])
def test_an_archive_whose_index_is_corrupt_is_one_line(tmp_path, capsys, kind) -> None:
    folder = write(tmp_path / "t", {"a.json": conversation("a", [request(0.0, [1, 2])])})
    raw = bytearray(_archive(kind, folder, tmp_path / f"t.{kind}").read_bytes())
    if kind == "zip":
        at = raw.rfind(b"PK\x01\x02")  # the central directory's entry
        raw[at : at + 4] = b"XXXX"
    else:
        raw[20:60] = bytes(40)  # the compressed stream's first bytes
    bad = tmp_path / f"bad.{kind}"
    bad.write_bytes(bytes(raw))
    code = main(["ingest", "--format", "agent-json", "--input", str(bad),
                 "--warehouse", str(tmp_path / "w.duckdb")])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "internal error" not in err and "Traceback" not in err
    assert str(bad) in err


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [("uniform:1h", "uniform", 3600.0), ("uniform:90", "uniform", 90.0),
     ("uniform:2.5m", "uniform", 150.0), ("poisson:30/h", "poisson", 30 / 3600),
     ("poisson:2/min", "poisson", 2 / 60), ("poisson:.5/s", "poisson", 0.5)],
)  # fmt: skip
def test_arrival_specs(text, kind, value) -> None:
    arrival = Arrival.parse(text, seed=3)
    assert (arrival.kind, arrival.value) == (kind, pytest.approx(value))
    starts = arrival.starts(50)
    assert len(starts) == 50 and (starts >= 0).all()
    if kind == "uniform":
        assert (starts < value).all()
    else:
        assert starts[0] == 0 and (np.diff(starts) >= 0).all()
    assert np.array_equal(starts, Arrival.parse(text, seed=3).starts(50))


@pytest.mark.parametrize(
    "text",
    ["uniform", "uniform:0", "uniform:-1h", "uniform:1y", "uniform:1e9d", "poisson:3",
     "poisson:0/s", "poisson:nan/s", "gaussian:1h", "uniform:1h; DROP TABLE runs", "x" * 500],
)  # fmt: skip
def test_bad_arrival_specs_are_refused_in_one_line(tmp_path, capsys, text) -> None:
    folder = write(tmp_path / "t", {"a.json": conversation("a", [request(0.0, [1])])})
    wh = tmp_path / "wh.duckdb"
    code = main(["ingest", "--format", "agent-json", "--input", str(folder),
                 "--warehouse", str(wh), "--arrival", text])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--arrival" in err and "Traceback" not in err
    assert not wh.exists()


def test_the_cli_reads_a_folder_and_records_the_placement(tmp_path, capsys) -> None:
    folder = write(tmp_path / "t", {"a.json": conversation("a", [request(0.0, [1, 2]), SUBAGENT])})
    wh = tmp_path / "wh.duckdb"
    code = main(["ingest", "--format", "agent-json", "--input", str(folder), "--warehouse",
                 str(wh), "--arrival", "poisson:3/h", "--arrival-seed", "7"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "3 requests = 3 accepted + 0 rejected" in out
    with duckdb.connect(str(wh), read_only=True) as con:
        (params,) = con.execute("SELECT parameters FROM runs WHERE command = 'ingest'").fetchone()
    options = json.loads(params)["options"]
    assert (options["arrival"], options["arrival_seed"]) == ("poisson:3/h", 7)


def test_other_formats_still_refuse_a_folder(tmp_path, capsys) -> None:
    folder = write(tmp_path / "t", {"a.json": "{}"})
    code = main(["ingest", "--format", "mooncake", "--input", str(folder),
                 "--warehouse", str(tmp_path / "wh.duckdb")])  # fmt: skip
    assert code != 0 and "is a directory" in capsys.readouterr().err


def test_the_trace_carries_the_sessions_tenant_by_tenant(tmp_path, empty_warehouse) -> None:
    """Each conversation and sub-agent is a session of the trace; the same conversation id
    again, in any tenant, repeats its request ids (``duplicate_request_id``)."""
    first = write(tmp_path / "t", {"a.json": conversation("c", [request(0.0, [1]), SUBAGENT])})
    second = write(tmp_path / "u", {"b.json": conversation("d", [request(1.0, [1]), SUBAGENT])})
    path = tmp_path / "w.duckdb"
    shutil.copy(empty_warehouse, path)
    with duckdb.connect(str(path)) as con:
        ingest(con, [first], tenant="x")
        ingest(con, [second], tenant="y")
        trace = load_trace(con)
        query = "SELECT tenant || session_id, count(*) FROM requests GROUP BY 1"
        sessions = dict(con.execute(query).fetchall())
    assert trace.sessions is not None and len(set(trace.sessions.tolist())) == 4 == len(sessions)


def test_several_inputs_are_placed_as_one_population(tmp_path, empty_warehouse) -> None:
    """Three conversations as one folder, or split over two inputs (in the order of their
    names), start at the same instants; no two inputs share their draws."""
    bodies = {f"{c}.json": conversation(c, [request(0.0, [1])]) for c in ("a", "b", "c")}
    whole = write(tmp_path / "whole", bodies)
    first = write(tmp_path / "p1", {k: v for k, v in bodies.items() if k != "c.json"})
    second = write(tmp_path / "p2", {"c.json": bodies["c.json"]})
    got = []
    for i, inputs in enumerate([[whole], [first, second]]):
        path = tmp_path / f"w{i}.duckdb"
        shutil.copy(empty_warehouse, path)
        with duckdb.connect(str(path)) as con:
            ingest(con, inputs, arrival="uniform:1h", arrival_seed=3)
            got.append(con.execute(
                "SELECT session_id, arrival_ts FROM requests ORDER BY 1").fetchall())  # fmt: skip
    assert got[0] == got[1] and len({t for _, t in got[0]}) == 3


@pytest.mark.parametrize("other_id", ["x", 1])
def test_a_conversation_id_seen_before_rejects_the_whole_conversation(wh, tmp_path, other_id):
    """ids ``"1"`` and ``1`` are one id; the later conversation is rejected whole, never merged
    into the first one's session or salts."""
    _, con = wh
    first_id = "x" if other_id == "x" else "1"
    later = [request(0.0, [7]), request(1.0, [7, 8])]
    body = {"a.json": conversation(first_id, [request(0.0, [1])]),
            "b.json": conversation(other_id, later)}  # fmt: skip
    result = ingest(con, [write(tmp_path / "t", body)])
    assert (result.accepted, result.rejected) == (1, 2)
    assert con.execute("SELECT DISTINCT reason FROM rejects").fetchall() == [
        ("duplicate_conversation",)
    ]


def test_the_flow_places_agent_traces_from_the_logs_first_arrival(tmp_path) -> None:
    from datetime import UTC, datetime

    from prefixscope.pipelines.agent_traces import agent_source
    from prefixscope.pipelines.flow_parameters import FlowParameters
    from prefixscope.stages import ingest as ingest_stage
    from tests.conftest import mooncake_line

    log = tmp_path / "log.jsonl"
    log.write_text(mooncake_line(timestamp=5_000, hash_ids=[1, 2]) + "\n")
    wh = tmp_path / "w.duckdb"
    start = datetime(2026, 3, 1, tzinfo=UTC)
    options = IngestOptions(start=start, hash_key=None)
    ingest_stage.ingest_logs(wh, ingest_stage.IngestSettings((str(log),), "mooncake", options))
    folder = write(tmp_path / "t", {"a.json": conversation("a", [request(0.0, [1])])})
    params = FlowParameters(inputs=(str(log),), agent_inputs=(str(folder),))
    source = agent_source(params, (str(folder),), None, wh)
    assert source.options.start == datetime(2026, 3, 1, 0, 0, 5, tzinfo=UTC)
    assert (source.format, source.options.tenant, source.options.block_size) == (
        "agent-json", "agents", 512,
    )  # fmt: skip

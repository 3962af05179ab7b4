"""``prefixscope export``: the requests as a Mooncake or Bailian trace whose re-ingest replays as
the warehouse does, to the token; dense, salted ids; bad input refused in one line."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shlex
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.cli import main
from prefixscope.export.ids import dense_ids
from prefixscope.terminal import MAX_ROWS, More, clip

POLICIES = "ceiling,lru,fifo,lfu,ttl,s3fifo,belady,pinned"
COMPARED = (
    "tenant, policy, policy_options, isolation, capacity_blocks, measure_window, requests, "
    "input_tokens, hit_tokens, cross_tenant_hit_tokens, hit_requests, warmup_requests"
)


def hash_id_lines(rng: random.Random, n: int = 120, bs: int = 4) -> list[str]:
    """Mooncake lines of two tenants: conversations that grow by whole and partial blocks, so
    prefixes are shared at every depth and last blocks are partial or whole."""
    lines, chains, next_id = [], [[] for _ in range(6)], 0
    for i in range(n):
        which = rng.randrange(len(chains))
        chain = chains[which]
        tokens = len(chain) * bs  # the chain's blocks, all full so far
        grow = rng.randrange(1, 3 * bs)
        tokens += grow
        while len(chain) < -(-tokens // bs):
            chain.append(next_id)
            next_id += 1
        line = {
            "timestamp": i * 250 + rng.randrange(3),
            "input_length": tokens,
            "output_length": rng.randrange(20),
            "hash_ids": list(chain),
            "tenant": "acme" if which % 2 else "globex",
        }
        lines.append(json.dumps(line))
        if tokens % bs:  # the partial block is a new block when the conversation goes on
            chain.pop()
    return lines


def token_lines(rng: random.Random, n: int = 120) -> list[str]:
    """Token-id rows (16-token blocks) with prompts shorter than a block, whole-block prompts
    and exact repeats (whose last block the engine recomputes), over shared system prompts."""
    systems = [list(range(1000 * k, 1000 * k + 16 * k + 5)) for k in (1, 2)]
    lines = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            tokens = [rng.randrange(50_000) for _ in range(rng.randrange(1, 16))]
        elif kind == 1:
            tokens = systems[i % 2][: 16 * (1 + i % 3)]  # whole blocks: an exact repeat later
        else:
            tokens = systems[i % 2] + [rng.randrange(50_000) for _ in range(rng.randrange(40))]
        lines.append(
            json.dumps(
                {
                    "timestamp": i * 0.5,
                    "tenant": f"t{i % 3}",
                    "session": f"u{i % 7}",
                    "output_tokens": 3,
                    "token_ids": tokens,
                }
            )
        )
    return lines


def simulate(wh: Path) -> list[tuple]:
    assert (
        main(
            [
                "simulate",
                "--warehouse",
                str(wh),
                "--policy",
                POLICIES,
                "--capacity-blocks",
                "24,80",
                "--ttl",
                "30",
                "--pin-top",
                "2",
                "--isolation",
                "salted",  # per tenant: the tenants must come back too
                "--window",
                "all,steady",
            ]
        )
        == 0
    )
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(f"SELECT {COMPARED} FROM hit_rates ORDER BY ALL").fetchall()


def ingest(wh: Path, path: Path, fmt: str, *flags: str) -> None:
    assert (
        main(["ingest", "--format", fmt, "--input", str(path), "--warehouse", str(wh), *flags]) == 0
    )


def export(wh: Path, out: Path, *flags: str) -> None:
    assert main(["export", "--warehouse", str(wh), "--out", str(out), *flags]) == 0


def read(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list]]:
    """A hash-id warehouse (Mooncake lines, 4-token blocks) and a token-source one (16-token
    blocks), each ingested and simulated once."""
    folder = tmp_path_factory.mktemp("export")
    rng = random.Random(11)
    out = {}
    for name, lines, fmt, flags in (
        (
            "hash_ids",
            hash_id_lines(rng),
            "mooncake",
            ("--block-size", "4", "--tenant-field", "tenant"),
        ),
        (
            "tokens",
            token_lines(rng),
            "tokens",
            ("--tenant-field", "tenant", "--session-field", "session"),
        ),
    ):
        log = folder / f"{name}.jsonl"
        log.write_text("\n".join(lines) + "\n")
        wh = folder / f"{name}.duckdb"
        ingest(wh, log, fmt, *flags)
        out[name] = (wh, simulate(wh))
    return out


@pytest.mark.parametrize(
    ("source", "fmt", "salt", "reingest"),
    [
        ("hash_ids", "mooncake", None, ("--block-size", "4")),
        ("hash_ids", "bailian", "other", ("--block-size", "4")),
        ("tokens", "mooncake", "s3cret", ("--block-size", "16", "--full-blocks")),
    ],
)
def test_the_reingested_export_gives_the_same_hit_rates_to_the_token(
    warehouses, tmp_path, capsys, source, fmt, salt, reingest
) -> None:
    wh, before = warehouses[source]
    out = tmp_path / "trace.jsonl.gz"
    capsys.readouterr()
    export(wh, out, "--format", fmt, *(["--salt", salt] if salt else []))
    printed = capsys.readouterr().out
    said = printed.split("read it back with: ")[1].split()
    assert all(word in said for word in reingest)  # the command it prints reads it back
    again = tmp_path / "again.duckdb"
    ingest(again, out, fmt, "--tenant-field", "tenant", *reingest)
    after = simulate(again)
    assert len(after) == len(before) > 40
    assert after == before


def test_a_token_source_export_names_every_started_block_and_reads_back_without_flags(
    warehouses, tmp_path
) -> None:
    """A token source hashes full blocks only; its export adds one id, on that line alone, for
    a prompt's partial tail, so every line meets Mooncake's rule (an id per started block, as
    GuideLLM requires). Read back without flags (the first line says ``last_token_rule``), the
    tail ids are left out again, and the requests are the warehouse's, block for block."""
    wh, before = warehouses["tokens"]
    out = tmp_path / "t.jsonl"
    export(wh, out, "--format", "mooncake")
    lines = read(out)
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 16) for r in lines)
    assert any(r["input_length"] % 16 for r in lines)
    again = tmp_path / "again.duckdb"
    assert main(["ingest", "--format", "mooncake", "--input", str(out), "--warehouse",
                 str(again), "--tenant-field", "tenant"]) == 0  # fmt: skip
    query = "SELECT input_tokens, len(block_hashes) FROM requests ORDER BY arrival_ts, source.line"
    with duckdb.connect(str(wh), read_only=True) as a, duckdb.connect(str(again)) as b:
        assert a.execute(query).fetchall() == b.execute(query).fetchall()
    assert simulate(again) == before


def test_fields_times_sessions_and_ids(warehouses, tmp_path) -> None:
    wh, _ = warehouses["tokens"]
    out = tmp_path / "t.jsonl"
    export(wh, out, "--format", "mooncake", "--sessions")
    rows = read(out)
    with duckdb.connect(str(wh), read_only=True) as con:
        truth = con.execute(
            "SELECT epoch_ms(arrival_ts) - epoch_ms(min(arrival_ts) OVER ()), input_tokens, "
            "greatest(coalesce(output_tokens, 1), 1), tenant, session_id, len(block_hashes) "
            "FROM requests "
            "ORDER BY arrival_ts, source.line"
        ).fetchall()
    # a token source's blocks, and one id more where the prompt ends in a partial block
    assert [
        (r["timestamp"], r["input_length"], r["output_length"], r["tenant"], len(r["hash_ids"]))
        for r in rows
    ] == [(*t[:4], t[5] + (t[1] % 16 > 0)) for t in truth]
    # sessions renamed s0, s1, … by first appearance: the same grouping, none of the log's names
    first: dict[str, str] = {}
    assert [r["session_id"] for r in rows] == [
        first.setdefault(t[4], f"s{len(first)}") for t in truth
    ]
    blocks = [r["hash_ids"][: r["input_length"] // 16] for r in rows]
    tails = [r["hash_ids"][-1] for r in rows if r["input_length"] % 16]
    ids = [i for b in blocks for i in b]
    assert sorted(set(ids)) == list(range(len(set(ids))))  # dense
    assert [i for k, i in enumerate(ids) if i not in ids[:k]] == sorted(set(ids))  # by first use
    # each tail id is one line's alone, numbered after every block's
    assert sorted(tails) == list(range(len(set(ids)), len(set(ids)) + len(tails)))
    assert "text" not in {k for r in rows for k in r} and "token_ids" not in out.read_text()


def test_a_salt_renumbers_blocks_and_only_it_reproduces_the_numbering(warehouses, tmp_path) -> None:
    wh, _ = warehouses["hash_ids"]
    files = {}
    for name, salt in (("a", "one"), ("b", "two"), ("c", "one"), ("plain", None)):
        files[name] = tmp_path / f"{name}.jsonl.gz"
        export(wh, files[name], "--format", "mooncake", *(["--salt", salt] if salt else []))
    ids = {k: [r["hash_ids"] for r in read(v)] for k, v in files.items()}
    assert files["a"].read_bytes() == files["c"].read_bytes()  # same salt: same file
    assert ids["a"] != ids["b"] and ids["a"] != ids["plain"]
    # each numbering is a relabelling of the same blocks: one-to-one onto the plain ids
    for k in ("a", "b"):
        pairs = {
            (p, s)
            for pr, sr in zip(ids["plain"], ids[k], strict=True)
            for p, s in zip(pr, sr, strict=True)
        }
        assert len(pairs) == len({p for p, _ in pairs}) == len({s for _, s in pairs})
    flat_a = [i for r in ids["a"] for i in r]
    assert sorted(set(flat_a)) == list(range(len(set(flat_a))))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1) | st.sampled_from([5, 7, 2**63]), max_size=60),
    st.none() | st.text(min_size=1, max_size=8),
)
def test_dense_ids_are_a_relabelling(values, salt) -> None:
    hashes = np.array(values, dtype=np.uint64)
    ids = dense_ids(hashes, salt)
    assert sorted(set(ids.tolist())) == list(range(len(set(values))))
    # equal hashes, and only they, share an id
    assert ((ids[:, None] == ids[None, :]) == (hashes[:, None] == hashes[None, :])).all()
    if salt is None:
        firsts = [ids[k] for k in range(len(values)) if values[k] not in values[:k]]
        assert firsts == sorted(firsts)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "csv"], "invalid choice: 'csv'"),
        (["--format", "mooncake", "--salt", ""], "the salt is empty"),
        (["--format", "mooncake", "--salt", "  "], "the salt is empty"),
        (["--format", "mooncake", "--out", "{missing}/t.jsonl"], "does not exist"),
        (["--format", "mooncake", "--out", "{locked}/t.jsonl"], "is not writable"),
        (["--format", "mooncake", "--tenant", "nobody"], "no requests of tenant nobody"),
        (["--format", "mooncake", "--warehouse", "{empty}"], "holds no requests"),
        (["--format", "mooncake", "--warehouse", "{absent}"], "no warehouse at"),
        (["--format", "bailian", "--warehouse", "{tokens}"], "export them with --format mooncake"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    warehouses, empty_warehouse, tmp_path, capsys, args, says
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if "{locked}" in " ".join(args) and os.access(locked, os.W_OK):
        pytest.skip("this user may write any folder (root)")
    paths = {
        "missing": tmp_path / "missing",
        "locked": locked,
        "empty": empty_warehouse,
        "absent": tmp_path / "absent.duckdb",
        "tokens": warehouses["tokens"][0],
    }
    args = [a.format(**paths) for a in args]
    out = tmp_path / "keep.jsonl"
    out.write_text("an earlier export\n")
    words = ["export", "--warehouse", str(warehouses["hash_ids"][0]), "--out", str(out), *args]
    capsys.readouterr()
    assert main(words) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out.read_text() == "an earlier export\n"  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.jsonl", "locked"]
    assert not (tmp_path / "absent.duckdb").exists()


@pytest.mark.parametrize("name", ["w h.duckdb", "it's $HOME`x` q\"uote.duckdb"])
def test_a_long_table_shows_20_rows_and_the_query_that_shows_them_all(
    warehouses, tmp_path, capsys, name
) -> None:
    """The hint is one shell line: split as a shell splits it, its query, run on its
    warehouse, gives every row of the table (the printed ones and the rest)."""
    wh = tmp_path / name
    wh.write_bytes(warehouses["hash_ids"][0].read_bytes())
    capsys.readouterr()
    assert main(["simulate", "--warehouse", str(wh), "--policy", "lru,fifo",
                 "--capacity-blocks", "5,10,20,40,80,160"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    *table, last = lines
    assert len(table) == 1 + MAX_ROWS  # the header, then 20 rows
    rest, hint = re.fullmatch(r"… (\d+) more rows: (.*)", last).groups()
    program, path, query = shlex.split(hint)
    assert (program, path) == ("duckdb", str(wh))
    with duckdb.connect(path, read_only=True) as con:
        [(total,)] = con.execute(f"SELECT count(*) FROM ({query})").fetchall()
    assert total == MAX_ROWS + int(rest) == 3 * 2 * 6  # fleet and two tenants, 2 × 6 caches


@pytest.mark.parametrize(("rows", "shown"), [(0, 0), (20, 20), (21, 21), (500, 21)])
def test_clip_keeps_twenty_and_counts_the_rest(rows, shown) -> None:
    lines = clip([f"r{i}" for i in range(rows)], More("wh", "SELECT 1"))
    assert len(lines) == shown and lines[: min(rows, 20)] == [f"r{i}" for i in range(min(rows, 20))]
    if rows > MAX_ROWS:
        assert lines[-1] == f'… {rows - 20} more rows: duckdb wh "SELECT 1"'
    assert clip([str(i) for i in range(rows)], None) == [str(i) for i in range(rows)]


@pytest.mark.parametrize(("fmt", "source"), [("mooncake", "tokens"), ("bailian", "hash_ids")])
def test_sessions_are_written_only_when_asked(warehouses, tmp_path, fmt, source) -> None:  # noqa: ANN001
    """A replay tool that reads sessions (AIPerf) replays one as a chat re-sending its earlier
    turns, which each prompt already holds: without ``--sessions`` no line names a session or a
    previous turn, and every request stands alone; with it, they do."""
    wh, _ = warehouses[source]
    plain, asked = tmp_path / "plain.jsonl", tmp_path / "sessions.jsonl"
    export(wh, plain, "--format", fmt)
    export(wh, asked, "--format", fmt, "--sessions")
    keys = {k for r in read(plain) for k in r}
    assert not keys & {"session_id", "parent"}
    assert {r.get("parent_chat_id", -1) for r in read(plain)} == {-1}
    said = [r for r in read(asked) if "session_id" in r or r.get("parent_chat_id", -1) != -1]
    assert bool(said) == (source == "tokens")  # the token log has sessions; Mooncake's none
    strip = ("session_id", "parent", "parent_chat_id")
    same = [{k: v for k, v in r.items() if k not in strip} for r in read(asked)]
    assert same == [{k: v for k, v in r.items() if k not in strip} for r in read(plain)]


@pytest.mark.parametrize(
    ("fmt", "tool"), [("mooncake", "mooncake_trace"), ("bailian", "bailian_trace")]
)
def test_the_export_prints_the_flags_each_replay_tool_needs(
    warehouses,
    tmp_path,
    capsys,
    fmt,
    tool,  # noqa: ANN001
) -> None:
    """AIPerf's and GuideLLM's defaults (512, or 16 for Bailian) are not the export's block size:
    the printed commands carry it, and GuideLLM's reads Mooncake's milliseconds as seconds."""
    wh, _ = warehouses["hash_ids"]
    out = tmp_path / "trace.jsonl"
    capsys.readouterr()
    export(wh, out, "--format", fmt)
    printed = capsys.readouterr().out
    aiperf = [x for x in printed.splitlines() if x.startswith("replay it with AIPerf: ")]
    assert aiperf and f"--custom-dataset-type {tool} --isl-block-size 4" in aiperf[0]
    assert f"--input-file {out}" in aiperf[0]
    guidellm = [x for x in printed.splitlines() if x.startswith("replay it with GuideLLM: ")]
    assert bool(guidellm) == (fmt == "mooncake")
    if guidellm:
        assert f"source.path={out},hash_id_block_size=4,time_scale=0.001" in guidellm[0]

"""Bailian, token tables and gateway logs: fields, chaining, salts, privacy, validation."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.load import load_trace
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.ingest.hashkey import resolve_key
from prefixscope.ingest.loader import FormatMismatch


def ingest(con, paths, fmt, **options):  # type: ignore[no-untyped-def]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        return ingest_files(con, paths, fmt, IngestOptions(**options), run_id)


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bailian(chat, parent, ts, n_in, ids, kind="text", turn=1):  # type: ignore[no-untyped-def]
    return {
        "chat_id": chat,
        "parent_chat_id": parent,
        "timestamp": ts,
        "input_length": n_in,
        "output_length": 5,
        "type": kind,
        "turn": turn,
        "hash_ids": ids,
    }


# --- Bailian -------------------------------------------------------------------------------


def test_bailian_chains_content_ids_so_only_equal_prefixes_hit(wh, tmp_path) -> None:
    _, con = wh
    path = jsonl(
        tmp_path / "b.jsonl",
        [
            bailian(1, -1, 0.0, 48, [10, 11, 12]),
            bailian(2, 1, 1.5, 64, [10, 11, 12, 13], turn=2),  # the first turn's three blocks hit
            bailian(3, -1, 2.0, 48, [99, 11, 12], kind="search"),  # 11, 12 after another parent
            bailian(4, -1, 3.0, 32, [11, 10]),  # same ids, other positions
        ],
    )
    result = ingest(con, [path], "bailian", tenant_from="type")
    assert (result.accepted, result.rejected) == (4, 0)
    rows = con.execute(
        "SELECT tenant, chat_id, parent_chat_id, turn, request_type, log_request_id, block_size,"
        " arrival_ts FROM requests ORDER BY chat_id"
    ).fetchall()
    assert [r[:7] for r in rows] == [
        ("text", 1, -1, 1, "text", "1", 16),
        ("text", 2, 1, 2, "text", "2", 16),
        ("search", 3, -1, 1, "search", "3", 16),
        ("text", 4, -1, 1, "text", "4", 16),
    ]
    assert (rows[1][7] - rows[0][7]).total_seconds() == 1.5
    hits = POLICIES["ceiling"].hit_blocks(load_trace(con), None).tolist()
    assert hits == [0, 3, 0, 0]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (bailian(5, -1, 0, 48, [1, 2]), "block_count_mismatch"),
        (bailian(5, 5, 0, 48, [1, 2, 3]), "self_parent"),
        (bailian(5, -2, 0, 48, [1, 2, 3]), "out_of_range"),
        ({**bailian(5, -1, 0, 48, [1, 2, 3]), "turn": "one"}, "wrong_type"),
        (
            {k: v for k, v in bailian(5, -1, 0, 48, [1, 2, 3]).items() if k != "type"},
            "missing_field",
        ),
    ],
)
def test_bailian_rejects(wh, tmp_path, row, reason) -> None:
    _, con = wh
    path = jsonl(tmp_path / "b.jsonl", [bailian(1, -1, 0, 16, [7]), row])
    result = ingest(con, [path], "bailian")
    assert (result.accepted, result.rejected) == (1, 1)
    assert con.execute("SELECT reason FROM rejects").fetchone() == (reason,)


# --- token tables --------------------------------------------------------------------------

SYSTEM = list(range(1000, 1040))  # 40 tokens: two full blocks of 16, then 8


def token_rows() -> list[dict]:
    return [
        {"ts": 1, "user": "acme", "sid": "s1", "toks": SYSTEM + [1, 2, 3]},
        {"ts": 2, "user": "acme", "sid": "s1", "toks": SYSTEM + [4, 5]},
        {"ts": 3, "user": "globex", "sid": "s9", "toks": SYSTEM + [6]},
    ]


MAPPED = (("token", "toks"), ("timestamp", "ts"), ("tenant", "user"), ("session", "sid"))


def first_blocks(con) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    rows = con.execute(
        "SELECT tenant, block_hashes[1] FROM requests ORDER BY arrival_ts"
    ).fetchall()
    out: dict[str, list[int]] = {}
    for tenant, h in rows:
        out.setdefault(tenant, []).append(h)
    return out


@pytest.mark.parametrize("container", ["jsonl", "parquet"])
def test_token_tables_hash_full_blocks_and_keep_fields(wh, tmp_path, container) -> None:
    _, con = wh
    rows = token_rows()
    if container == "jsonl":
        path = jsonl(tmp_path / "t.jsonl", rows)
    else:
        path = tmp_path / "t.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    result = ingest(con, [path], "tokens", fields=MAPPED)
    assert (result.lines, result.accepted) == (3, 3)
    got = con.execute(
        "SELECT tenant, session_id, input_tokens, len(block_hashes) FROM requests ORDER BY 1, 3"
    ).fetchall()
    assert got == [("acme", "s1", 42, 2), ("acme", "s1", 43, 2), ("globex", "s9", 41, 2)]
    blocks = first_blocks(con)
    assert blocks["acme"][0] == blocks["acme"][1] == blocks["globex"][0]  # unsalted: shared


def test_jsonl_and_parquet_give_the_same_hashes(tmp_path) -> None:
    hashes = []
    for container in ("jsonl", "parquet"):
        con = warehouse.connect(tmp_path / f"{container}.duckdb")
        if container == "jsonl":
            path = jsonl(tmp_path / "t.jsonl", token_rows())
        else:
            path = tmp_path / "t.parquet"
            pq.write_table(pa.Table.from_pylist(token_rows()), path)
        ingest(con, [path], "tokens", fields=MAPPED)
        hashes.append(
            con.execute("SELECT block_hashes FROM requests ORDER BY arrival_ts").fetchall()
        )
        con.close()
    assert hashes[0] == hashes[1]


def test_salts_separate_tenants_and_only_tenants(wh, tmp_path) -> None:
    _, con = wh
    ingest(
        con, [jsonl(tmp_path / "t.jsonl", token_rows())], "tokens", fields=MAPPED, salt_tenants=True
    )
    blocks = first_blocks(con)
    assert blocks["acme"][0] == blocks["acme"][1]  # same tenant, same salt: shared
    assert blocks["acme"][0] != blocks["globex"][0]  # salted tenants never share
    trace = load_trace(con)
    assert POLICIES["ceiling"].hit_blocks(trace, None).tolist() == [0, 2, 0]


@pytest.mark.parametrize(
    ("block_size", "blocks"), [(16, [2, 2, 2]), (32, [1, 1, 1]), (8, [5, 5, 5])]
)
def test_block_size_sets_the_number_of_full_blocks(wh, tmp_path, block_size, blocks) -> None:
    _, con = wh
    ingest(
        con,
        [jsonl(tmp_path / "t.jsonl", token_rows())],
        "tokens",
        fields=MAPPED,
        block_size=block_size,
    )
    got = [
        n
        for (n,) in con.execute(
            "SELECT len(block_hashes) FROM requests ORDER BY arrival_ts"
        ).fetchall()
    ]
    assert got == blocks


def test_hashes_are_the_same_run_to_run(tmp_path) -> None:
    runs = []
    for i in range(2):
        con = warehouse.connect(tmp_path / f"w{i}.duckdb")
        ingest(con, [jsonl(tmp_path / "t.jsonl", token_rows())], "tokens", fields=MAPPED)
        runs.append(con.execute("SELECT block_hashes FROM requests ORDER BY arrival_ts").fetchall())
        con.close()
    assert runs[0] == runs[1]
    # and the documented value: xxh64(parent 0 ‖ 16 little-endian uint32 token ids), stored
    # as it is with --hash-key-file none, else keyed: BLAKE2b-64(the user's key, it)
    import hashlib

    import xxhash

    first = xxhash.xxh64_intdigest(
        (0).to_bytes(8, "little") + b"".join(t.to_bytes(4, "little") for t in SYSTEM[:16])
    )
    key = resolve_key(None)
    assert key is not None
    digest = hashlib.blake2b(first.to_bytes(8, "little"), key=key.key, digest_size=8).digest()
    assert runs[0][0][0][0] == int.from_bytes(digest, "little")
    con = warehouse.connect(tmp_path / "plain.duckdb")
    ingest(con, [tmp_path / "t.jsonl"], "tokens", fields=MAPPED, hash_key=None)
    plain = con.execute("SELECT block_hashes FROM requests ORDER BY arrival_ts").fetchall()
    con.close()
    assert plain[0][0][0] == first


# --- gateway logs --------------------------------------------------------------------------

SYSTEM_PROMPT = "You are the support assistant of Initech. Be brief and cite the manual. " * 4


def gateway_row(ts, user, question, cached=None, rid=None):  # type: ignore[no-untyped-def]
    response = {"id": rid or f"r-{ts}", "choices": [{"message": {"content": "Sure thing."}}]}
    if cached is not None:
        response["usage"] = {
            "prompt_tokens": 99,
            "completion_tokens": 4,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
    return {
        "timestamp": ts,
        "user": user,
        "response": response,
        "request": {
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": question},
            ]
        },
    }


@pytest.fixture
def tokenizer_json(tmp_path) -> Path:  # type: ignore[no-untyped-def]
    """A real (tiny) BPE tokenizer, trained here: tests make their own data."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[UNK]", "<|im_start|>", "<|im_end|>"]
    )
    tok.train_from_iterator([SYSTEM_PROMPT, "What is the manual? Where is it?"] * 20, trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("use_tokenizer", [False, True])
def test_gateway_logs_render_tokenize_and_share_the_system_prompt(
    wh, tmp_path, tokenizer_json, use_tokenizer
) -> None:
    _, con = wh
    path = jsonl(
        tmp_path / "g.jsonl",
        [
            gateway_row("2026-11-01T10:00:00Z", "acme", "Where is the SECRET-ALPHA manual?", 0),
            gateway_row("2026-11-01T10:00:02Z", "acme", "What is SECRET-BETA?", 64),
        ],
    )
    template = tmp_path / "t.jinja"
    template.write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
        "<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
    )
    result = ingest(
        con,
        [path],
        "openai",
        fields=(("tenant", "user"),),
        tokenizer=str(tokenizer_json) if use_tokenizer else None,
        chat_template=str(template) if use_tokenizer else None,
    )
    assert (result.accepted, result.rejected) == (2, 0)
    rows = con.execute(
        "SELECT log_request_id, output_tokens, reported_cached_tokens, "
        "input_tokens, len(block_hashes) FROM requests ORDER BY arrival_ts"
    ).fetchall()
    assert [r[:3] for r in rows] == [
        ("r-2026-11-01T10:00:00Z", 4, 0),
        ("r-2026-11-01T10:00:02Z", 4, 64),
    ]
    assert all(r[4] == r[3] // 16 for r in rows)
    hits = POLICIES["ceiling"].hit_blocks(load_trace(con), None).tolist()
    assert hits[0] == 0 and hits[1] >= 2  # the system prompt's blocks are shared
    con.close()
    raw = (Path(wh[0])).read_bytes()
    assert b"SECRET" not in raw and b"Initech" not in raw


def test_gateway_text_never_reaches_rejects_or_output(wh, tmp_path, capsys) -> None:
    path = jsonl(
        tmp_path / "g.jsonl",
        [
            gateway_row(1, "acme", "hello"),
            {"timestamp": 2, "user": "acme", "request": {"messages": "TOPSECRET text"}},
            {"timestamp": 3, "user": "acme", "request": {"messages": [{"content": "TOPSECRET"}]}},
        ],
    )
    db = tmp_path / "g.duckdb"
    assert (
        main(
            [
                "ingest",
                "--format",
                "openai",
                "--input",
                str(path),
                "--warehouse",
                str(db),
                "--tenant-field",
                "user",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert "TOPSECRET" not in out.out + out.err
    con = duckdb.connect(str(db), read_only=True)
    rejects = con.execute("SELECT reason, detail FROM rejects").fetchall()
    con.close()
    assert rejects == [
        ("wrong_type", "request.messages is VARCHAR, expected an array"),
        ("missing_field", "missing or null: request.messages.0.role"),
    ]
    assert "TOPSECRET" not in json.dumps(rejects) and b"TOPSECRET" not in db.read_bytes()


def test_pseudonymized_tenants_are_keyed_hashes(wh, tmp_path) -> None:
    _, con = wh
    path = jsonl(tmp_path / "g.jsonl", [gateway_row(1, "acme", "a"), gateway_row(2, "globex", "b")])
    ingest(con, [path], "openai", fields=(("tenant", "user"),), pseudonymize_key="k1")
    tenants = {t for (t,) in con.execute("SELECT tenant FROM requests").fetchall()}
    assert len(tenants) == 2 and all(t.startswith("t-") and len(t) == 18 for t in tenants)
    assert not tenants & {"acme", "globex"}


# --- validation across formats -------------------------------------------------------------


def test_duplicate_request_ids_within_and_across_files(wh, tmp_path) -> None:
    _, con = wh
    first = jsonl(
        tmp_path / "a.jsonl",
        [
            gateway_row(1, "u", "a", rid="x1"),
            gateway_row(2, "u", "b", rid="x1"),
            gateway_row(3, "u", "c", rid="x2"),
        ],
    )
    second = jsonl(
        tmp_path / "b.jsonl",
        [gateway_row(4, "u", "d", rid="x2"), gateway_row(5, "u", "e", rid="x3")],
    )
    a = ingest(con, [first], "openai")
    b = ingest(con, [second], "openai")
    assert (a.accepted, a.rejected, b.accepted, b.rejected) == (2, 1, 1, 1)
    assert dict(a.files[0].reasons) == {"duplicate_request_id": 1}
    again = ingest(con, [first], "openai")  # re-ingesting a file is not a duplicate of itself
    assert (again.accepted, again.rejected) == (2, 1)


def test_timestamps_going_backwards_are_kept_and_counted(wh, tmp_path) -> None:
    _, con = wh
    path = jsonl(
        tmp_path / "b.jsonl", [bailian(i, -1, ts, 16, [i]) for i, ts in enumerate([0, 5, 3, 9, 1])]
    )
    result = ingest(con, [path], "bailian")
    assert (result.accepted, result.files[0].out_of_order) == (5, 2)
    assert con.execute("SELECT out_of_order FROM sources").fetchone() == (2,)


@pytest.mark.parametrize(
    ("fmt", "content"),
    [
        ("mooncake", [gateway_row(1, "u", "q")] * 3),
        ("bailian", [{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}]),
        ("tokens", [{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}]),
    ],
)
def test_a_file_of_another_format_fails_fast_and_writes_nothing(tmp_path, capsys, fmt, content):
    path = jsonl(tmp_path / "x.jsonl", content)
    db = tmp_path / "x.duckdb"
    assert main(["ingest", "--format", fmt, "--input", str(path), "--warehouse", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"does not look like {fmt}" in err and "Traceback" not in err
    assert not db.exists()  # it failed before its first write: no warehouse is created


def test_a_parquet_file_for_a_json_format_fails_fast(wh, tmp_path) -> None:
    _, con = wh
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(token_rows()), path)
    with pytest.raises(FormatMismatch, match="Parquet"):
        ingest(con, [path], "mooncake")


SAMPLES = Path(__file__).resolve().parents[1] / "data" / "sample" / "formats"


@pytest.mark.parametrize(
    ("fmt", "options", "tokens", "blocks"),
    [
        ("bailian", {}, [521, 680, 70], [33, 43, 5]),
        ("openai", {"fields": (("tenant", "user"),)}, None, None),
        (
            "tokens",
            {
                "fields": (
                    ("tenant", "tenant"),
                    ("session", "session"),
                    ("output_tokens", "output_tokens"),
                )
            },
            [21, 41],
            [1, 2],
        ),
    ],
)
def test_the_documented_samples_ingest_whole(wh, fmt, options, tokens, blocks) -> None:
    _, con = wh
    result = ingest(con, [SAMPLES / f"{fmt}.jsonl"], fmt, **options)
    assert result.rejected == 0 and result.accepted == result.lines
    got = con.execute(
        "SELECT input_tokens, len(block_hashes) FROM requests ORDER BY arrival_ts"
    ).fetchall()
    if tokens is not None:
        assert [g[0] for g in got] == tokens and [g[1] for g in got] == blocks

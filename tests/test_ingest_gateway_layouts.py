"""Gateway logs as gateways write them: the request body at the top level of each line
(LiteLLM's standard logging payload, and flat logs with a top-level ``usage``), named with
``--request-field .`` or told apart line by line; the prompt is hashed the same whatever the
layout, and no text is kept."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from prefixscope import warehouse
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions, ingest_files

SYSTEM = "You are the billing assistant of Umbrella Corp. Quote the invoice number. " * 3
MESSAGES = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Why was SECRET-GAMMA charged twice?"},
]
START = 1_767_261_600.25  # 2026-01-01T10:00:00.25Z
USAGE = {
    "prompt_tokens": 99,
    "completion_tokens": 7,
    "prompt_tokens_details": {"cached_tokens": 48},
}
REPLY = [{"message": {"role": "assistant", "content": "Refunded."}}]


def nested() -> dict:
    """The layout the format documents: request and response objects."""
    return {
        "timestamp": START,
        "user": "team-a",
        "request": {"model": "qwen", "messages": MESSAGES},
        "response": {"id": "chatcmpl-1", "choices": REPLY, "usage": USAGE},
    }


def litellm() -> dict:
    """LiteLLM's StandardLoggingPayload (field names from its spec, values made up here):
    ``messages`` at the top level, the provider's response (with ``usage``) under ``response``,
    epoch-second ``startTime``/``endTime``, the team under ``metadata``."""
    return {
        "id": "litellm-call-1",
        "trace_id": "trace-1",
        "call_type": "acompletion",
        "stream": False,
        "status": "success",
        "response_cost": 0.00012,
        "startTime": START,
        "endTime": START + 1.5,
        "completionStartTime": START + 0.4,
        "model": "qwen",
        "model_group": "qwen",
        "api_base": "http://vllm:8000/v1",
        "prompt_tokens": 99,
        "completion_tokens": 7,
        "total_tokens": 106,
        "cache_hit": None,
        "end_user": "user-42",
        "metadata": {"user_api_key_team_id": "team-a", "user_api_key_hash": "88dc28"},
        "messages": MESSAGES,
        "response": {"id": "chatcmpl-1", "object": "chat.completion", "choices": REPLY,
                     "usage": USAGE},
        "model_parameters": {"temperature": 0.2},
    }  # fmt: skip


def flat() -> dict:
    """A gateway that logs the body and the usage side by side at the top level."""
    return {"id": "req-1", "timestamp": START, "messages": MESSAGES, "usage": USAGE,
            "choices": REPLY, "user": "team-a"}  # fmt: skip


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def ingest_rows(tmp_path: Path, wh: tuple, rows: list[dict], **fields: str):  # type: ignore[no-untyped-def]
    _, con = wh
    options = IngestOptions(fields=tuple(fields.items()))
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        result = ingest_files(con, [write(tmp_path / "g.jsonl", rows)], "openai", options, run_id)
    got = con.execute(
        "SELECT tenant, log_request_id, epoch(arrival_ts), output_tokens, reported_cached_tokens, "
        "block_hashes FROM requests ORDER BY source.line"
    ).fetchall()
    rejects = con.execute("SELECT reason, detail FROM rejects ORDER BY source.line").fetchall()
    return result, got, rejects


@pytest.fixture
def reference(tmp_path_factory, empty_warehouse) -> list:  # type: ignore[no-untyped-def]
    """The nested layout's block hashes: every layout must give the same."""
    import shutil

    path = tmp_path_factory.mktemp("ref") / "wh.duckdb"
    shutil.copy(empty_warehouse, path)
    con = duckdb.connect(str(path))
    try:
        _, got, _ = ingest_rows(path.parent, (path, con), [nested()])
    finally:
        con.close()
    return got[0][5]


# (layout, flags, expected tenant, request id, output tokens, cached tokens)
LAYOUTS = [
    ("nested", {"tenant": "user"}, "team-a", "chatcmpl-1", 7, 48),
    ("litellm", {}, "default", "chatcmpl-1", 7, 48),  # detected
    ("litellm", {"request": "."}, "default", "chatcmpl-1", 7, 48),
    (
        "litellm",
        {"request": ".", "timestamp": "startTime", "request_id": "id",
         "tenant": "metadata.user_api_key_team_id"},
        "team-a", "litellm-call-1", 7, 48,
    ),
    ("litellm", {"tenant": "end_user"}, "user-42", "chatcmpl-1", 7, 48),
    ("flat", {}, "default", "req-1", 7, 48),  # detected: body and usage from the line
    ("flat", {"request": ".", "response": ".", "tenant": "user"}, "team-a", "req-1", 7, 48),
    # a response path a flag names is not second-guessed: no top-level usage is read
    ("flat", {"request": ".", "response": "reply"}, "default", None, None, None),
]  # fmt: skip


@pytest.mark.parametrize(("layout", "flags", "tenant", "rid", "out", "cached"), LAYOUTS)
def test_every_layout_reads_the_same_request(
    tmp_path, wh, reference, layout, flags, tenant, rid, out, cached
) -> None:
    row = {"nested": nested, "litellm": litellm, "flat": flat}[layout]()
    result, got, rejects = ingest_rows(tmp_path, wh, [row], **flags)
    assert (result.accepted, rejects) == (1, [])
    assert got[0][:5] == (tenant, rid, pytest.approx(START), out, cached)
    assert got[0][5] == reference and len(reference) > 2  # the layout never changes the prompt


def test_layouts_are_told_apart_line_by_line(tmp_path, wh) -> None:
    later = [dict(r(), timestamp=START + i) for i, r in enumerate((flat, nested), 1)]
    for row, rid in zip(later, ("req-2", "chatcmpl-2"), strict=True):
        (row.get("response") or row)["id"] = rid
    result, got, _ = ingest_rows(tmp_path, wh, [litellm(), *later])
    assert result.accepted == 3
    assert [g[1] for g in got] == ["chatcmpl-1", "req-2", "chatcmpl-2"]
    assert got[0][5] == got[1][5] == got[2][5]


@pytest.mark.parametrize(
    ("row", "flags", "reason", "detail"),
    [
        # neither a request object nor top-level messages
        ({"timestamp": START, "prompt_tokens": 9}, {}, "missing_field",
         "missing or null: request (or top-level messages, input, "),
        # a path a flag names is never second-guessed
        (litellm(), {"request": "request"}, "missing_field", "missing or null: request"),
        # the line itself, but it holds no prompt
        ({"timestamp": START, "usage": USAGE}, {"request": "."}, "missing_field",
         "missing or null: messages or input or prompt"),
        # no timestamp and no startTime
        ({"messages": MESSAGES}, {}, "missing_field", "missing or null: timestamp (or "),
        ({**litellm(), "startTime": "soon"}, {}, "wrong_type",
         "timestamp (or startTime or metrics.arrival_time) is VARCHAR"),
    ],
)  # fmt: skip
def test_lines_in_no_layout_are_rejected_with_their_reason(
    tmp_path, wh, row, flags, reason, detail
) -> None:
    good = litellm() if flags.get("request") != "request" else nested()
    good["id"] = "ok"
    result, _, rejects = ingest_rows(tmp_path, wh, [good, row], **flags)
    assert result.rejected == 1 and rejects[0][0] == reason
    if detail is not None:
        assert rejects[0][1].startswith(detail)


def test_tools_in_model_parameters_are_rendered(tmp_path, wh) -> None:
    tools = [{"type": "function", "function": {"name": "lookup_invoice"}}]
    with_tools = litellm()
    with_tools["model_parameters"] = {"tools": tools}
    with_tools["response"] = {**with_tools["response"], "id": "chatcmpl-2"}
    nested_tools = nested()
    nested_tools["request"]["tools"] = tools
    nested_tools["response"]["id"] = "chatcmpl-3"
    _, got, _ = ingest_rows(tmp_path, wh, [litellm(), with_tools, nested_tools])
    assert got[0][5] != got[1][5] == got[2][5]


def test_the_command_reads_a_litellm_log_and_keeps_no_text(tmp_path, capsys) -> None:
    log = write(tmp_path / "litellm.jsonl", [litellm(), {**litellm(), "id": "x", "messages": None}])
    db = tmp_path / "g.duckdb"
    argv = ["ingest", "--format", "openai", "--input", str(log), "--warehouse", str(db)]
    assert (
        main([*argv, "--request-field", ".", "--tenant-field", "metadata.user_api_key_team_id"])
        == 0
    )
    out = capsys.readouterr()
    assert "1 accepted, 1 rejected" in out.out
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT tenant FROM requests").fetchall() == [("team-a",)]
        rejects = con.execute("SELECT reason, detail FROM rejects").fetchall()
    assert rejects[0] == ("missing_field", "missing or null: messages or input or prompt")
    raw = db.read_bytes()
    for text in (b"SECRET-GAMMA", b"Umbrella", b"Refunded"):
        assert text not in raw and text.decode() not in out.out + out.err + json.dumps(rejects)

"""Every API's cached-token field, read with its own semantics (docs/ingest.md#usage-layouts):
each line below is modelled on its API's documented request and response, is told apart by
itself (or named with ``--layout``), and gives the prompt's block hashes and the counts the
API means. The prompt is the same request throughout, so each text layout must give the chat
layout's hashes, and each token-id layout the ``tokens`` format's hashes of its ids."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.cli import main
from prefixscope.ingest import IngestOptions
from prefixscope.ingest.formats import FORMATS
from prefixscope.ingest.formats.otlp import Otlp
from prefixscope.ingest.lines import FileReadState

SYSTEM = "You are the billing assistant of Umbrella Corp. Quote the invoice number. " * 3
USER = "Why was SECRET-GAMMA charged twice?"
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
START = 1_767_261_600.25  # 2026-01-01T10:00:00.25Z
START_ISO = "2026-01-01T10:00:00.250Z"
IDS = list(range(1000, 1040))  # 40 token ids: two whole blocks of 16 and a tail
COMPLETION = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n"


def parse(rows: list[object], layout: str = "auto", fmt: str = "openai", **fields: str) -> pa.Table:
    """The stage rows of ``rows`` (JSON values, or bytes as they are), parsed in process."""
    raw = [r if isinstance(r, bytes) else json.dumps(r).encode() for r in rows]
    batch = pa.table(
        {
            "line": pa.array(range(1, len(rows) + 1), pa.int64()),
            "raw": pa.array(raw, pa.large_binary()),
        }
    )
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    try:
        options = IngestOptions(layout=layout, fields=tuple(fields.items()))
        return FORMATS[fmt].parse(con, batch, options)
    finally:
        con.close()


def one(row: object, **options: str) -> dict:
    got = parse([row], **options).to_pylist()[0]
    assert got["reason"] is None, got["detail"]
    return got


# --- the lines, one per API (samples modelled on each API's documentation) ------------------


def chat(cached: object = 48) -> dict:
    """OpenAI Chat Completions (also vLLM's and SGLang's OpenAI-compatible servers)."""
    return {"timestamp": START,
            "request": {"model": "gpt-4o", "messages": MESSAGES},
            "response": {"id": "chatcmpl-1", "object": "chat.completion",
                         "choices": [{"index": 0, "message": {"role": "assistant",
                                                              "content": "Refunded."}}],
                         "usage": {"prompt_tokens": 99, "completion_tokens": 7,
                                   "total_tokens": 106,
                                   "prompt_tokens_details": {"cached_tokens": cached}},
                         }}  # fmt: skip


def litellm_usage() -> dict:
    """LiteLLM's normalized usage of an Anthropic call: OpenAI's names, Anthropic's counts."""
    line = chat()
    line["response"]["usage"] = {"prompt_tokens": 99, "completion_tokens": 7,
                                 "cache_read_input_tokens": 48,
                                 "cache_creation_input_tokens": 16}  # fmt: skip
    return line


def responses(input_: object = USER, cached: object = 48, **usage: object) -> dict:
    """The OpenAI Responses API: ``instructions`` and ``input``; ``usage.input_tokens``."""
    return {"timestamp": START,
            "request": {"model": "gpt-4.1", "instructions": SYSTEM, "input": input_},
            "response": {"id": "resp_1", "object": "response", "status": "completed",
                         "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                                     "content": [{"type": "output_text", "text": "Refunded.",
                                                  "annotations": []}]}],
                         "usage": {"input_tokens": 99,
                                   "input_tokens_details": {"cached_tokens": cached},
                                   "output_tokens": 7,
                                   "output_tokens_details": {"reasoning_tokens": 0},
                                   "total_tokens": 106, **usage}}}  # fmt: skip


def anthropic(system: object = SYSTEM, **usage: object) -> dict:
    """Anthropic's Messages API: top-level ``system``; ``input_tokens`` excludes the cache."""
    counts = {"input_tokens": 3, "cache_creation_input_tokens": 48,
              "cache_read_input_tokens": 48, "output_tokens": 7, **usage}  # fmt: skip
    return {"timestamp": START,
            "request": {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": system,
                        "messages": [{"role": "user", "content": USER}]},
            "response": {"id": "msg_01", "type": "message", "role": "assistant",
                         "content": [{"type": "text", "text": "Refunded."}],
                         "stop_reason": "end_turn", "usage": counts}}  # fmt: skip


def sglang(request: dict, **meta: object) -> dict:
    """SGLang's native ``/generate``: ``text`` or ``input_ids``; ``meta_info``."""
    info = {"id": "a1b2", "finish_reason": {"type": "stop", "matched": 151645},
            "prompt_tokens": 40, "completion_tokens": 7, "cached_tokens": 32,
            "e2e_latency": 0.12, **meta}  # fmt: skip
    body = {**request, "sampling_params": {"temperature": 0, "max_new_tokens": 32}}
    return {"timestamp": START, "request": body,
            "response": {"text": "Refunded.", "meta_info": info}}  # fmt: skip


def vllm(**changes: object) -> dict:
    """vLLM's ``RequestOutput`` as a log line: ``prompt_token_ids``, ``num_cached_tokens``."""
    return {"timestamp": START, "request_id": "cmpl-7", "prompt": "…", "prompt_token_ids": IDS,
            "num_cached_tokens": 32,
            "outputs": [{"index": 0, "text": "Refunded.", "token_ids": [9, 8, 7],
                         "finish_reason": "stop"}],
            "finished": True, **changes}  # fmt: skip


def spend_log(**changes: object) -> dict:
    """A row of LiteLLM_SpendLogs (``store_prompts_in_spend_logs``), as a database export writes
    it: JSON columns as strings."""
    usage = {"prompt_tokens": 99, "completion_tokens": 7, "cache_read_input_tokens": 48,
             "cache_creation_input_tokens": 0}  # fmt: skip
    return {"request_id": "chatcmpl-9", "call_type": "acompletion", "api_key": "88dc28d0f030c5",
            "spend": 0.00042, "total_tokens": 106, "prompt_tokens": 99, "completion_tokens": 7,
            "startTime": START_ISO, "endTime": "2026-01-01T10:00:01.750Z",
            "model": "claude-sonnet-4-5", "api_base": "https://api.anthropic.com", "user": "",
            "team_id": "team-a", "cache_hit": "False", "cache_key": "", "request_tags": [],
            "metadata": json.dumps({"user_api_key_team_id": "team-a", "usage_object": usage}),
            "messages": json.dumps(MESSAGES), "response": json.dumps({"id": "chatcmpl-9"}),
            **changes}  # fmt: skip


@pytest.fixture(scope="module")
def reference() -> dict[str, list[int]]:
    """The hashes every layout must reproduce: the chat messages, a completion string, and
    the token ids through the ``tokens`` format (another reader of the same ids)."""
    return {
        "messages": one(chat())["block_hashes"],
        "text": one({"timestamp": START, "request": {"prompt": COMPLETION}})["block_hashes"],
        "ids": one({"timestamp": START, "token_ids": IDS}, fmt="tokens")["block_hashes"],
    }


# (line, layout flag, prompt the hashes come from, request id, cached, prompt, created, output)
ACCEPTED = [
    ("chat", chat(), "auto", "messages", "chatcmpl-1", 48, 99, None, 7),
    ("chat_named", chat(), "chat", "messages", "chatcmpl-1", 48, 99, None, 7),
    ("vllm_server", chat(cached=32), "auto", "messages", "chatcmpl-1", 32, 99, None, 7),
    ("litellm_normalized", litellm_usage(), "auto", "messages", "chatcmpl-1", 48, 99, 16, 7),
    ("responses_string", responses(), "auto", "messages", "resp_1", 48, 99, None, 7),
    ("responses_items",
     responses([{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": USER}]}]),
     "auto", "messages", "resp_1", 48, 99, None, 7),
    ("responses_named", responses(), "responses", "messages", "resp_1", 48, 99, None, 7),
    # 3 + 48 + 48: the cached 48 exceed input_tokens (3), which a naive reading would reject
    ("anthropic", anthropic(), "auto", "messages", "msg_01", 48, 99, 48, 7),
    ("anthropic_system_blocks",
     anthropic([{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]),
     "auto", "messages", "msg_01", 48, 99, 48, 7),
    ("anthropic_named", anthropic(), "anthropic", "messages", "msg_01", 48, 99, 48, 7),
    ("anthropic_no_cache",
     anthropic(input_tokens=99, cache_creation_input_tokens=None, cache_read_input_tokens=None),
     "auto", "messages", "msg_01", None, 99, None, 7),
    ("sglang_text", sglang({"text": COMPLETION}), "auto", "text", None, 32, 40, None, 7),
    ("sglang_ids", sglang({"input_ids": IDS}), "auto", "ids", None, 32, 40, None, 7),
    ("vllm", vllm(), "auto", "ids", "cmpl-7", 32, 40, None, 3),
    ("vllm_named", vllm(), "vllm", "ids", "cmpl-7", 32, 40, None, 3),
    ("spend_log", spend_log(), "auto", "messages", "chatcmpl-9", 48, 99, 0, 7),
    ("spend_log_proxied",
     spend_log(messages=None, proxy_server_request={"model": "claude", "messages": MESSAGES}),
     "litellm", "messages", "chatcmpl-9", 48, 99, 0, 7),
]  # fmt: skip


def parsed(cases: list[tuple]) -> dict[str, dict]:
    """The stage row of each case's line (``(name, line, layout, ...)``), by name: one parse
    per layout flag, the lines side by side (a line's row never depends on its neighbours:
    the property test below)."""
    out = {}
    for layout in {case[2] for case in cases}:
        group = [case for case in cases if case[2] == layout]
        rows = parse([case[1] for case in group], layout=layout).to_pylist()
        out.update({case[0]: row for case, row in zip(group, rows, strict=True)})
    return out


@pytest.fixture(scope="module")
def accepted() -> dict[str, dict]:
    return parsed(ACCEPTED)


@pytest.mark.parametrize(
    ("name", "prompt", "rid", "cached", "total", "created", "output"),
    [(case[0], *case[3:]) for case in ACCEPTED],
    ids=[case[0] for case in ACCEPTED],
)
def test_each_api_gives_its_prompt_and_its_counts(
    reference, accepted, name, prompt, rid, cached, total, created, output
) -> None:
    got = accepted[name]
    assert got["reason"] is None, got["detail"]
    assert got["block_hashes"] == reference[prompt] and len(got["block_hashes"]) >= 2
    assert got["arrival_ts"].timestamp() == pytest.approx(START)
    assert (got["log_request_id"], got["output_tokens"]) == (rid, output)
    counts = (got["reported_cached_tokens"], got["reported_prompt_tokens"])
    assert counts + (got["reported_cache_creation_tokens"],) == (cached, total, created)


def test_anthropic_input_tokens_exclude_what_the_cache_served() -> None:
    """The prompt is input + cache read + cache creation. OpenAI's arithmetic on the same
    numbers (input_tokens as the prompt) would put 2,048 cached tokens in a 5-token prompt and
    reject the line as beyond its prompt."""
    got = one(
        anthropic(input_tokens=5, cache_read_input_tokens=2048, cache_creation_input_tokens=7)
    )
    assert got["reported_prompt_tokens"] == 5 + 2048 + 7
    assert got["reported_cached_tokens"] == 2048 and got["reported_cache_creation_tokens"] == 7
    counts = {"input_tokens": 5, "cache_read_input_tokens": 2048, "cache_creation_input_tokens": 7}
    assert one(anthropic(**counts), layout="anthropic") == got  # detected as it is named


def test_a_named_layout_is_not_second_guessed() -> None:
    got = one(responses(), layout="anthropic")  # Anthropic's fields are not on this line
    assert (got["reported_cached_tokens"], got["reported_prompt_tokens"]) == (None, 99)


# (line, layout, reason, start of the message)
C = "response.usage"
REJECTED = [
    ("chat_beyond_prompt", chat(cached=100), "auto", "out_of_range",
     "usage.prompt_tokens_details.cached_tokens (100) exceeds the prompt's 99 tokens"),
    ("chat_negative", chat(cached=-1), "auto", "out_of_range",
     f"{C}.prompt_tokens_details.cached_tokens (or usage.prompt_tokens_details.cached_tokens)"
     " is out of range"),
    ("chat_decimal", chat(cached=2.5), "auto", "wrong_type",
     f"{C}.prompt_tokens_details.cached_tokens (or"),
    ("responses_beyond_prompt", responses(cached=120), "auto", "out_of_range",
     "usage.input_tokens_details.cached_tokens (120) exceeds the prompt's 99 tokens"),
    ("responses_string_count", responses(cached="48"), "auto", "wrong_type",
     f"{C}.input_tokens_details.cached_tokens (or"),
    ("responses_bool_count", responses(cached=True), "auto", "wrong_type",
     f"{C}.input_tokens_details.cached_tokens (or"),
    ("responses_input_number", responses(input_=7), "auto", "wrong_type",
     "request.input is BIGINT, expected a string or an array"),
    ("anthropic_negative_read", anthropic(cache_read_input_tokens=-48), "auto", "out_of_range",
     f"{C}.cache_read_input_tokens (or usage.cache_read_input_tokens) is out of range"),
    ("anthropic_decimal_input", anthropic(input_tokens=3.5), "auto", "wrong_type",
     f"{C}.input_tokens (or usage.input_tokens) is DOUBLE"),
    ("anthropic_huge_creation", anthropic(cache_creation_input_tokens=10**19), "auto",
     "out_of_range", f"{C}.cache_creation_input_tokens (or"),
    ("anthropic_system_number", anthropic(system=5), "auto", "wrong_type",
     "request.system is BIGINT, expected a string or an array"),
    ("ambiguous", responses(cache_read_input_tokens=48), "auto", "ambiguous_layout",
     "the usage has marks of both"),
    ("sglang_beyond_prompt", sglang({"text": COMPLETION}, cached_tokens=41), "auto",
     "out_of_range", "meta_info.cached_tokens (41) exceeds the prompt's 40 tokens"),
    ("sglang_bad_id", sglang({"input_ids": [1, -2, 3]}), "auto", "out_of_range",
     "request.input_ids holds an id below 0"),
    ("vllm_beyond_ids", vllm(num_cached_tokens=48), "auto", "out_of_range",
     "num_cached_tokens (48) exceeds the prompt's 40 tokens"),
    ("vllm_string_ids", vllm(prompt_token_ids=["a"]), "auto", "wrong_type",
     "prompt_token_ids is an array holding a non-integer"),
    ("vllm_decimal_count", vllm(num_cached_tokens=1.5), "auto", "wrong_type",
     "response.num_cached_tokens (or num_cached_tokens) is DOUBLE"),
    ("spend_log_huge", spend_log(metadata={"usage_object": {"cache_read_input_tokens": 10**19}}),
     "auto", "out_of_range", "metadata.usage_object.cache_read_input_tokens is out of range"),
    ("spend_log_beyond", spend_log(prompt_tokens=40), "auto", "out_of_range",
     "metadata.usage_object.cache_read_input_tokens (48) exceeds the prompt's 40 tokens"),
    ("spend_log_not_stored", spend_log(messages="{}"), "auto", "prompt_not_captured",
     "messages is empty: LiteLLM stores the prompt"),
    ("no_prompt", {"timestamp": START, "request": {"model": "m"}}, "auto", "missing_field",
     "missing or null: request.messages or request.input or request.prompt"),
]  # fmt: skip


@pytest.fixture(scope="module")
def rejected() -> dict[str, dict]:
    return parsed([("good", chat(), "auto"), *REJECTED])


@pytest.mark.parametrize(
    ("name", "reason", "detail"),
    [(case[0], *case[3:]) for case in REJECTED],
    ids=[case[0] for case in REJECTED],
)
def test_a_bad_count_or_prompt_is_rejected_naming_its_field(rejected, name, reason, detail) -> None:
    assert rejected["good"]["reason"] is None
    got = rejected[name]
    assert (got["reason"], got["detail"][: len(detail)]) == (reason, detail)
    for column in ("reported_cached_tokens", "reported_prompt_tokens", "block_hashes"):
        assert got[column] in (None, [])  # a rejected line keeps nothing


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from([("good", c[1]) for c in ACCEPTED if c[2] == "auto"]),
            st.sampled_from([("bad", c[1]) for c in REJECTED if c[2] == "auto"]),
            st.binary(max_size=40).map(lambda b: ("bad", b.replace(b"\n", b""))),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_every_line_is_accepted_or_rejected_and_mixing_changes_none(lines) -> None:
    rows = parse([row for _, row in lines]).to_pylist()
    assert len(rows) == len(lines)
    for (kind, _), row in zip(lines, rows, strict=True):
        assert (row["reason"] is None) == (kind == "good")
        assert row["reason"] is None or row["detail"]


# --- OpenTelemetry GenAI spans --------------------------------------------------------------


def attrs(**values: object) -> list[dict]:
    """OTLP attributes: ``gen_ai__usage__input_tokens=99`` is ``gen_ai.usage.input_tokens``."""
    out = []
    for key, value in values.items():
        if isinstance(value, bool):
            v: dict = {"boolValue": value}
        elif isinstance(value, int):
            v = {"intValue": str(value)}  # int64 as a JSON string, as OTLP/JSON encodes it
        elif isinstance(value, dict):
            v = value  # a raw AnyValue
        else:
            v = {"stringValue": value}
        out.append({"key": key.replace("__", "."), "value": v})
    return out


OTEL_MESSAGES = json.dumps([{"role": "user", "parts": [{"type": "text", "content": USER}]}])
OTEL_SYSTEM = json.dumps([{"type": "text", "content": SYSTEM}])


def span(number: int, **values: object) -> dict:
    base = {"gen_ai__operation__name": "chat", "gen_ai__provider__name": "openai",
            "gen_ai__request__model": "gpt-4o", "gen_ai__response__id": f"chatcmpl-{number}",
            "gen_ai__conversation__id": "conv-1",
            "gen_ai__usage__input_tokens": 99, "gen_ai__usage__cache_read__input_tokens": 48,
            "gen_ai__usage__output_tokens": 7,
            "gen_ai__system_instructions": OTEL_SYSTEM,
            "gen_ai__input__messages": OTEL_MESSAGES}  # fmt: skip
    base.update(values)
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": f"{number:016x}",
            "name": "chat gpt-4o", "kind": 3,
            "startTimeUnixNano": str(int(START * 1e6) * 1000 + number),
            "endTimeUnixNano": str(int(START * 1e6 + 2e6) * 1000),
            "attributes": attrs(**{k: v for k, v in base.items() if v is not None})}  # fmt: skip


def export(*spans: dict, team: str = "team-a") -> dict:
    resource = {"attributes": attrs(service__name="billing", team=team)}
    scope = {"scope": {"name": "opentelemetry.instrumentation.openai_v2"}, "spans": list(spans)}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


def read_otlp(path: Path, **fields: str) -> pa.Table:
    fmt, state = Otlp(), FileReadState()
    options = IngestOptions(fields=tuple(fields.items()))
    con = duckdb.connect()
    try:
        parts = [fmt.parse(con, batch, options) for batch in fmt.batches(path, state)]
    finally:
        con.close()
    rows = pa.concat_tables(parts)
    assert rows.num_rows == state.lines
    return rows


OTLP_LINES = [
    export(span(1), span(2, gen_ai__input__messages=None),
           span(3, gen_ai__operation__name="invoke_agent"),
           span(4, gen_ai__system_instructions=None)),
    b'{"resourceSpans": [',
    export(span(5, gen_ai__usage__cache_read__input_tokens={"intValue": "12.5"}),
           span(6, gen_ai__usage__cache_read__input_tokens=120),
           span(7, gen_ai__usage__input_tokens={"doubleValue": 99.0}), team="team-b"),
    {"resourceSpans": "none"},
]  # fmt: skip
# The rows of OTLP_LINES, in file order: (reason, start of the message)
OTLP_ROWS = [
    (None, None),
    ("prompt_not_captured", "the span has no gen_ai.input.messages"),
    ("not_inference_span", "gen_ai.operation.name is not chat"),
    (None, None),
    ("invalid_json", "line 2 of the file is not valid JSON"),
    ("malformed_attribute", "the span's attribute 6: a intValue"),
    ("out_of_range",
     "attribute gen_ai.usage.cache_read.input_tokens (120) exceeds the prompt's 99 tokens"),
    ("wrong_type", "attribute gen_ai.usage.input_tokens is DOUBLE"),
    ("missing_field", "line 4: missing or not an array: resourceSpans"),
]  # fmt: skip


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_bytes(b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n"
                              for x in lines))  # fmt: skip
    return path


def test_otlp_lines_give_one_row_per_span_each_with_its_reason(tmp_path, reference) -> None:
    rows = read_otlp(write_jsonl(tmp_path / "spans.jsonl", OTLP_LINES), tenant="team")
    got = [(r["reason"], r["detail"] and r["detail"][: len(d or "")]) for r, (_, d) in
           zip(rows.to_pylist(), OTLP_ROWS, strict=True)]  # fmt: skip
    assert got == OTLP_ROWS
    first, fourth = rows.to_pylist()[0], rows.to_pylist()[3]
    assert first["block_hashes"] == reference["messages"]  # system instructions, then messages
    assert fourth["block_hashes"] != reference["messages"] and fourth["block_hashes"]
    assert (first["tenant"], first["session_id"], first["log_request_id"]) == (
        "team-a", "conv-1", "chatcmpl-1")  # fmt: skip
    assert first["arrival_ts"].timestamp() == pytest.approx(START)
    counts = ("reported_cached_tokens", "reported_prompt_tokens", "output_tokens")
    assert tuple(first[c] for c in counts) == (48, 99, 7)


def test_otlp_reads_one_pretty_printed_document_too(tmp_path, reference) -> None:
    doc = export(span(1), span(2, gen_ai__input__messages=None), span(3))
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc, indent=2))
    rows = read_otlp(path).to_pylist()
    assert [r["reason"] for r in rows] == [None, "prompt_not_captured", None]
    assert rows[0]["block_hashes"] == rows[2]["block_hashes"] == reference["messages"]
    assert rows[0]["tenant"] == "default"


def test_the_otlp_command_counts_every_span_and_keeps_no_text(tmp_path, capsys) -> None:
    log = write_jsonl(tmp_path / "spans.jsonl", OTLP_LINES)
    db = tmp_path / "o.duckdb"
    argv = ["ingest", "--format", "otlp", "--input", str(log), "--warehouse", str(db)]
    assert main([*argv, "--tenant-field", "team"]) == 0
    out = capsys.readouterr().out
    assert "9 lines, 2 accepted, 7 rejected" in out and "prompt_not_captured 1" in out
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM rejects").fetchone() == (7,)
        assert con.execute("SELECT sum(reported_cached_tokens) FROM requests").fetchone() == (96,)
    raw = db.read_bytes()
    assert b"SECRET-GAMMA" not in raw and b"Umbrella" not in raw


def test_a_file_of_spans_without_prompts_stops_the_command_with_one_line(tmp_path, capsys) -> None:
    log = write_jsonl(tmp_path / "spans.jsonl", [export(span(1, gen_ai__input__messages=None))])
    db = tmp_path / "o.duckdb"
    code = main(["ingest", "--format", "otlp", "--input", str(log), "--warehouse", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "prompt_not_captured" in err
    assert not db.exists()


# --- generated logs in each layout ------------------------------------------------------------


def test_a_generated_log_reads_the_same_in_every_layout(tmp_path) -> None:
    """``synthetic_gateway.in_layout`` writes the same requests and reports as each API logs
    them (what benchmarks/validate_layouts.py validates): every layout gives the chat layout's
    hashes and counts, Anthropic's through its own arithmetic."""
    from prefixscope.synthetic_gateway import (
        LAYOUTS,
        GatewayWorkload,
        conversation_lines,
        in_layout,
    )

    lines = conversation_lines(GatewayWorkload(sessions=4, tenants=("acme",)), seed=3)
    for i, line in enumerate(lines):  # reports as an engine would give them: whole blocks
        usage = line["response"]["usage"]
        usage["prompt_tokens"] = 100 + 7 * i
        usage["prompt_tokens_details"] = {"cached_tokens": 16 * (i % 5)}
    columns = ("tenant", "arrival_ts", "block_hashes", "reported_cached_tokens",
               "reported_prompt_tokens", "output_tokens")  # fmt: skip
    got = {}
    for layout in LAYOUTS:
        written = [in_layout(line, layout, 16) for line in lines]
        if layout == "otlp":
            rows = read_otlp(write_jsonl(tmp_path / "otlp.jsonl", written), tenant="user")
        else:
            rows = parse(written, tenant="user")
        assert rows["reason"].null_count == rows.num_rows == len(lines)
        got[layout] = [tuple(r[c] for c in columns) for r in rows.to_pylist()]
    assert all(got[layout] == got["chat"] for layout in LAYOUTS)
    assert [g[3:5] for g in got["chat"]] == [(16 * (i % 5), 100 + 7 * i) for i in range(len(lines))]


def test_a_cut_gzip_export_keeps_its_whole_spans_and_counts_the_tail(tmp_path, capsys) -> None:
    import gzip

    lines = [export(*(span(i) for i in range(10 * j, 10 * j + 10))) for j in range(1, 7)]
    packed = gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    log = tmp_path / "spans.jsonl.gz"
    log.write_bytes(packed[: len(packed) * 2 // 3])
    db = tmp_path / "o.duckdb"
    assert main(["ingest", "--format", "otlp", "--input", str(log), "--warehouse", str(db)]) == 0
    out = capsys.readouterr().out
    with duckdb.connect(str(db), read_only=True) as con:
        (kept,) = con.execute("SELECT count(*) FROM requests").fetchone()  # type: ignore[misc]
        assert con.execute("SELECT reason FROM rejects").fetchall() == [("truncated_file",)]
    assert 0 < kept < 60 and kept % 10 == 0  # whole export lines only
    assert f"{kept + 1} lines, {kept} accepted, 1 rejected — the file ends early" in out


@pytest.mark.parametrize(
    ("content", "reasons", "detail"),
    [
        # one pretty-printed document with one byte that is not UTF-8: the document's fault
        (lambda: json.dumps(export(span(1)), indent=1).encode().replace(b"billing", b"bill\xffng"),
         ["invalid_utf8"], "the document is not valid UTF-8 (byte"),
        # a line of JSON lines nested 10,000 deep: too deep to read, not "not JSON"
        (lambda: json.dumps(export(span(1))).encode() + b"\n" + b"[" * 10_000 + b"]" * 10_000,
         [None, "invalid_json"], "line 2 of the file nests too deeply to read"),
        # a string escaping a lone surrogate: that span alone, not the file's tenant column
        (lambda: (json.dumps(export(span(1))) + "\n" + json.dumps(export(span(2))).replace(
            '"stringValue": "', '"stringValue": "\\ud800', 1)).encode(),
         [None, "invalid_json"], "line 2: a string escapes a lone surrogate"),
    ],
    ids=["a bad byte in one document", "a line nested 10,000 deep", "a lone surrogate"],
)
def test_otlp_names_the_cause(tmp_path, content, reasons, detail) -> None:  # noqa: ANN001
    path = tmp_path / "spans.json"
    path.write_bytes(content())
    rows = read_otlp(path).to_pylist()
    assert [r["reason"] for r in rows] == reasons
    assert rows[-1]["detail"].startswith(detail)

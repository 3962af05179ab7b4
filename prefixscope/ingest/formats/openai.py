"""Request logs of an OpenAI-compatible gateway, one JSON object per line:

    {"timestamp": "2026-11-01T10:00:00Z", "user": "acme",
     "request": {"model": "…", "messages": [{"role": "system", "content": "…"}, …]},
     "response": {"id": "…", "choices": [{"message": {"content": "…"}}],
                  "usage": {"prompt_tokens": 812, "completion_tokens": 90,
                            "prompt_tokens_details": {"cached_tokens": 768}}}}

The prompt is rendered as the serving engine would see it — with ``--chat-template FILE`` (a
Jinja chat template, rendered as Hugging Face's ``apply_chat_template`` does), else the default
ChatML layout below — then tokenized with ``--tokenizer tokenizer.json`` (the ``tokenizers``
library), else the deterministic fallback below, and its full blocks hashed
(``prefixscope.ingest.hashing``). Text lives only in memory while a batch is processed: it is
never written, logged or put in a reject message.

Fields, each renameable by a flag (dotted paths): ``timestamp`` (number in
``--timestamp-unit``, or ISO 8601), tenant (``--tenant-field``; else ``--tenant``), request id
(``--request-id-field``, default ``response.id``), the body (``request``): ``messages`` (chat)
or ``prompt`` (completions), optional ``tools``; the response: ``usage.completion_tokens``
(else the tokenized response text) and ``usage.prompt_tokens_details.cached_tokens``, kept as
``reported_cached_tokens``.

Gateways that log the body at the top level (LiteLLM's standard logging payload: ``messages``,
``startTime``, ``response`` with its ``usage``; others put ``usage`` at the top level too) are
read as they are: ``--request-field .`` (and ``--response-field .``) name the line itself, and
without those flags the layout is told apart line by line (:func:`layout_fields`).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats.base import IngestOptions, JsonLines
from prefixscope.ingest.formats.jsonfields import ROOT, Field, parse_fields
from prefixscope.ingest.formats.paths import join_path
from prefixscope.ingest.formats.tokensource import arrival_field, finish_token_rows

#: The layout used without ``--chat-template``: ChatML, as Qwen and many open models use it.
DEFAULT_CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: Without a tokenizer: split text into pieces as GPT-2's pre-tokenizer does, and give each piece
#: the id crc32(piece). Deterministic, and equal text prefixes give equal token prefixes; counts
#: are close to a BPE tokenizer's for English, not equal. Give --tokenizer for exact counts.
FALLBACK_PIECES = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def fallback_encode(texts: Sequence[str]) -> list[list[int]]:
    return [
        [zlib.crc32(p.encode("utf-8")) for p in FALLBACK_PIECES.findall(text)] for text in texts
    ]


@cache
def _tokenizer(path: str) -> Callable[[Sequence[str]], list[list[int]]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)

    def encode(texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    return encode


@cache
def _template(source: str):  # type: ignore[no-untyped-def]
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(
        x, indent=indent, ensure_ascii=ensure_ascii
    )
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def check_chat_template(options: IngestOptions) -> None:
    """Compile ``--chat-template`` once, before any file is read: a template that cannot be read
    or compiled is a command error (ValueError naming the file and Jinja's message), never a
    ``template_error`` reject on every line."""
    if not options.chat_template:
        return
    path = Path(options.chat_template)
    try:
        source = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the chat template {path}: {exc}") from exc
    from jinja2.exceptions import TemplateError

    try:
        _template(source)
    except TemplateError as exc:
        where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        raise ValueError(
            f"the chat template {path} does not compile{where}: {exc.message or exc}"
        ) from exc


def _flatten_content(content: Any) -> Any:
    """Message content as text: the text parts of a multi-part content, a placeholder per image."""
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                out.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                out.append(f"<|{part.get('type', 'part')}|>")
        return "".join(out)
    return "" if content is None else content


def _tools(body: dict[str, Any]) -> Any:
    """The body's ``tools``, else ``model_parameters.tools`` (where LiteLLM's standard logging
    payload keeps the request's parameters)."""
    if body.get("tools") is not None:
        return body["tools"]
    parameters = body.get("model_parameters")
    return parameters.get("tools") if isinstance(parameters, dict) else None


def render(body: dict[str, Any], template_source: str) -> str:
    """The prompt text of one request body (raises ValueError when it has none)."""
    if isinstance(body.get("messages"), list):
        messages = []
        for m in body["messages"]:
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError("a message without a role")
            messages.append({**m, "content": _flatten_content(m.get("content"))})
        return str(
            _template(template_source).render(
                messages=messages,
                tools=_tools(body),
                add_generation_prompt=True,
                bos_token="",
                eos_token="",
            )
        )
    if isinstance(body.get("prompt"), str):
        return body["prompt"]
    raise ValueError("the request has neither messages nor a prompt string")


def _response_text(response: Any) -> str | None:
    try:
        choice = response["choices"][0]
    except (KeyError, IndexError, TypeError):
        return None
    message = choice.get("message") if isinstance(choice, dict) else None
    if isinstance(message, dict):
        return str(_flatten_content(message.get("content")))
    text = choice.get("text") if isinstance(choice, dict) else None
    return text if isinstance(text, str) else None


def _under(base: str, path: str) -> str:
    """The dotted ``path`` (this module's own, e.g. ``usage.completion_tokens``) under the
    field path ``base`` (a flag's)."""
    return join_path(base, *path.split("."))


def body_problem(body: Any, where: str) -> tuple[str, str] | None:
    """Why the request ``body`` (found at the path ``where``) holds no prompt, as a reject
    reason and its message naming the field; None when it has one to render."""
    messages, prompt = join_path(where, "messages"), join_path(where, "prompt")
    has_messages = body.get("messages") is not None
    if not has_messages and body.get("prompt") is None:
        return "missing_field", f"missing or null: {messages} (or {prompt})"
    if not has_messages:
        if not isinstance(body["prompt"], str):
            return "wrong_type", f"{prompt} is {_kind(body['prompt'])}, expected a string"
        return None
    if not isinstance(body["messages"], list):
        if isinstance(body.get("prompt"), str):
            return None
        return "wrong_type", f"{messages} is {_kind(body['messages'])}, expected an array"
    for i, m in enumerate(body["messages"]):
        if not isinstance(m, dict):
            return "wrong_type", f"{join_path(messages, str(i))} is {_kind(m)}, expected an object"
        if m.get("role") is None:
            return "missing_field", f"missing or null: {join_path(messages, str(i), 'role')}"
    return None


def _kind(value: Any) -> str:
    """The JSON type of a parsed value, in the words of DuckDB's ``json_type`` (as every other
    wrong_type message names types)."""
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "BIGINT"
    names = {float: "DOUBLE", str: "VARCHAR", list: "ARRAY", dict: "OBJECT"}
    return next((n for t, n in names.items() if isinstance(value, t)), "NULL")


def layout_fields(options: IngestOptions) -> tuple[Field, ...]:
    """Where a line keeps its parts. Flags name paths (``.``: the line itself); without them a
    line is read in either layout, told apart per line:

    - nested: ``request`` (the body) and ``response`` objects, a ``timestamp``;
    - top level, as gateways such as LiteLLM log (its standard logging payload): the line is
      the body when it has no ``request`` and a top-level ``messages``; the line is also the
      response when it has no ``response`` and a top-level ``usage``; the request id is
      ``response.id``, else a top-level ``id``; the time is ``timestamp``, else ``startTime``.
    """
    request = options.field("request")
    response = options.field("response")
    reply = response or "response"
    usage = (
        ("usage.completion_tokens", "output_tokens"),
        ("usage.prompt_tokens_details.cached_tokens", "reported_cached_tokens"),
    )
    arrival = arrival_field(options)
    if options.field("timestamp") is None:
        arrival = replace(arrival, fallbacks=("startTime",))
    return (
        arrival,
        Field(
            "body",
            request or "request",
            "object",
            fallbacks=() if request else (ROOT,),
            root_if="messages",
        ),
        Field(
            "response",
            reply,
            "json",
            required=False,
            fallbacks=() if response else (ROOT,),
            root_if="usage",
        ),
        Field(
            "log_request_id",
            options.field("request_id") or _under(reply, "id"),
            "id",
            required=False,
            fallbacks=() if response or options.field("request_id") else ("id",),
        ),
        *(
            Field(
                name,
                _under(reply, path),
                "integer",
                required=False,
                minimum=0,
                fallbacks=() if response else (path,),
            )
            for path, name in usage
        ),
    )


@dataclass(frozen=True)
class OpenAI(JsonLines):
    name: str = "openai"
    default_block_size: int = 16

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        fields = list(layout_fields(options))
        request = options.field("request")
        if request is None:  # where the body was found, for messages that name its fields
            fields.append(Field("request_given", "request", "json", required=False))
        for name, flag in (("tenant", "tenant"), ("session_id", "session")):
            path = options.field(flag)
            if path:  # a mapped field is required: a row without it is rejected, not guessed
                fields.append(Field(name, path, "id"))
        rows = parse_fields(con, batch, fields, (), options.max_line_bytes)
        template = (
            Path(options.chat_template).read_text("utf-8")
            if options.chat_template
            else DEFAULT_CHAT_TEMPLATE
        )
        encode = _tokenizer(options.tokenizer) if options.tokenizer else fallback_encode

        reasons = rows["reason"].to_pylist()
        details = rows["detail"].to_pylist()
        outputs = rows["output_tokens"].to_pylist()
        prompts: list[str] = []
        replies: list[tuple[int, str]] = []
        where: list[int] = []
        given = rows["request_given"].to_pylist() if request is None else [True] * rows.num_rows
        for i, (reason, body, resp) in enumerate(
            zip(reasons, rows["body"].to_pylist(), rows["response"].to_pylist(), strict=True)
        ):
            if reason is not None:
                continue
            request_body = json.loads(body)
            at = request or ("request" if given[i] not in (None, "null") else ROOT)
            problem = body_problem(request_body, at)
            if problem is not None:  # named as the log has it, before any template runs
                reasons[i], details[i] = problem
                continue
            try:
                prompts.append(render(request_body, template))
                where.append(i)
            except Exception as exc:  # noqa: BLE001 -- any template failure is this row's reject
                reasons[i] = "template_error"
                details[i] = f"the prompt could not be rendered ({type(exc).__name__})"
                continue
            if outputs[i] is None and resp is not None:
                text = _response_text(json.loads(resp))
                if text is not None:
                    replies.append((i, text))
        token_ids: list[list[int] | None] = [None] * rows.num_rows
        for i, ids in zip(where, encode(prompts), strict=True):
            token_ids[i] = ids
            if not ids:
                reasons[i], details[i] = "out_of_range", "the prompt renders to no tokens"
        for (i, _), ids in zip(replies, encode([t for _, t in replies]), strict=True):
            outputs[i] = len(ids)
        del prompts, replies  # the text goes no further than this function
        rows = (
            rows.drop_columns(
                ["body", "response", "reason", "detail", "output_tokens"]
                + (["request_given"] if request is None else [])
            )
            .append_column("reason", pa.array(reasons, pa.string()))
            .append_column("detail", pa.array(details, pa.string()))
            .append_column("output_tokens", pa.array(outputs, pa.int64()))
            .append_column("token_ids", pa.array(token_ids, pa.list_(pa.uint64())))
        )
        if "tenant" not in rows.column_names:
            rows = rows.append_column("tenant", pa.array([options.tenant] * rows.num_rows))
        rows = rows.set_column(
            rows.schema.get_field_index("token_ids"),
            "token_ids",
            pc.if_else(
                pc.is_null(rows["reason"]),
                rows["token_ids"],
                pa.scalar(None, pa.list_(pa.uint64())),
            ),
        )
        return finish_token_rows(rows, options, options.block_size or self.default_block_size)

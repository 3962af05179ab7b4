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

from prefixscope.ingest.formats.base import IngestOptions, JsonLines
from prefixscope.ingest.formats.jsonfields import ROOT, Field, parse_fields
from prefixscope.ingest.formats.paths import join_path
from prefixscope.ingest.formats.prompts import (
    PROMPT_KEYS,
    Problem,
    Prompt,
    flatten_content,
    prompt_of,
)
from prefixscope.ingest.formats.restructure import TIMEOUT_S, RestructureTimeout, move_to_end
from prefixscope.ingest.formats.tokensource import arrival_field, finish_token_rows
from prefixscope.ingest.formats.usage import AUTO, LAYOUTS, Counts, Usage, check, detect

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


def render(prompt: Prompt, template_source: str) -> str:
    """The prompt text of one request: its messages through the chat template, or its string."""
    if prompt.messages is not None:
        return str(
            _template(template_source).render(
                messages=list(prompt.messages),
                tools=prompt.tools,
                add_generation_prompt=True,
                bos_token="",
                eos_token="",
            )
        )
    return prompt.text or ""


def _response_text(response: Any) -> str | None:
    """The generated text of a response: OpenAI Chat/Completions ``choices[0]``, Anthropic's
    ``content`` blocks, the Responses API's ``output`` messages, SGLang's ``text``, vLLM's
    ``outputs[0].text``."""
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return flatten_content(message.get("content"))
        text = choices[0].get("text")
        return text if isinstance(text, str) else None
    if isinstance(response.get("content"), list):  # Anthropic
        return flatten_content(response["content"])
    if isinstance(response.get("output"), list):  # Responses API
        return "".join(
            flatten_content(item.get("content"))
            for item in response["output"]
            if isinstance(item, dict) and item.get("type") == "message"
        )
    outputs = response.get("outputs")
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):  # vLLM
        text = outputs[0].get("text")
        return text if isinstance(text, str) else None
    text = response.get("text")  # SGLang /generate
    return text if isinstance(text, str) and "meta_info" in response else None


#: The top-level keys a layout reads from the line itself (LiteLLM's spend logs): only these
#: are taken from it, not the whole line, which the body and response already hold.
LINE_KEYS = ("spend", "request_id", "metadata", "prompt_tokens", "completion_tokens")
#: Top-level keys that make a line its own request body, or its own response
#: (``proxy_server_request``: a LiteLLM spend log that kept the request but not its messages).
BODY_KEYS = (*PROMPT_KEYS, "proxy_server_request")
REPLY_KEYS = ("usage", "meta_info", "num_cached_tokens")


def layout_fields(options: IngestOptions) -> tuple[Field, ...]:
    """Where a line keeps its parts. Flags name paths (``.``: the line itself); without them a
    line is read in either layout, told apart per line:

    - nested: ``request`` (the body) and ``response`` objects, a ``timestamp``;
    - top level, as gateways such as LiteLLM log (its standard logging payload): the line is
      the body when it has no ``request`` and a top-level prompt key (:data:`BODY_KEYS`);
      the line is also the response when it has no ``response`` and a top-level ``usage``,
      ``meta_info`` or ``num_cached_tokens``; the request id is ``response.id``, else a
      top-level ``id``, else ``request_id``; the time is ``timestamp``, else ``startTime``,
      else ``metrics.arrival_time``.
    """
    request = options.field("request")
    response = options.field("response")
    reply = response or "response"
    arrival = arrival_field(options)
    if options.field("timestamp") is None:
        arrival = replace(arrival, fallbacks=("startTime", "metrics.arrival_time"))
    return (
        arrival,
        Field(
            "body",
            request or "request",
            "object",
            fallbacks=() if request else (ROOT,),
            root_if=BODY_KEYS,
        ),
        Field(
            "response",
            reply,
            "json",
            required=False,
            fallbacks=() if response else (ROOT,),
            root_if=REPLY_KEYS,
        ),
        Field(
            "log_request_id",
            options.field("request_id") or _under(reply, "id"),
            "id",
            required=False,
            fallbacks=() if response or options.field("request_id") else ("id", "request_id"),
        ),
        *(Field(f"top_{key}", key, "json", required=False) for key in LINE_KEYS),
    )


def _under(base: str, path: str) -> str:
    """The dotted ``path`` (this module's own, e.g. ``usage.completion_tokens``) under the
    field path ``base`` (a flag's)."""
    return join_path(base, *path.split("."))


def loads(text: str) -> Any:
    """A JSON value DuckDB has validated (Python's parser keeps the last of duplicate keys,
    DuckDB's the first: a line that repeats a key it is read by is read at the first in the
    fields DuckDB extracts, the last in the values taken apart here)."""
    return json.loads(text)


def _decoded(value: Any) -> Any:
    """A JSON column that a database export wrote as a string (LiteLLM_SpendLogs' ``messages``,
    ``metadata``): its value, when the string is JSON; else the value as it is."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return loads(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class Request:
    """One line, read: its prompt, its counts with its API's semantics, its response text."""

    prompt: Prompt
    usage: Usage
    reply_text: str | None


def read_request(
    line: dict[str, Any], body: Any, reply: Any, options: IngestOptions, at: str
) -> Request | Problem:
    """One line's prompt and usage under its layout (``--layout``, else :func:`detect`)."""
    layout = options.layout
    if layout == AUTO:
        found = detect(line, body, reply)
        if isinstance(found, Problem):
            return found
        layout = found
    if layout == "litellm":  # spend logs keep JSON columns, maybe as strings
        line = {**line, "metadata": _decoded(line.get("metadata"))}
        body = {**body, "messages": _decoded(body.get("messages"))}
        proxied = _decoded(body.get("proxy_server_request"))
        if not body["messages"] and isinstance(proxied, dict) and proxied.get("messages"):
            body, at = proxied, join_path(at, "proxy_server_request")
        elif not body["messages"]:  # "{}" or "[]": LiteLLM stored no prompt
            return Problem(
                "prompt_not_captured",
                f"{join_path(at, 'messages')} is empty: LiteLLM stores the prompt in its spend "
                "logs only with store_prompts_in_spend_logs",
            )
    prompt = prompt_of(body, at)
    if isinstance(prompt, Problem):
        return prompt
    response = options.field("response")
    counts = Counts(reply, response or "response", None if response else ROOT)
    on_line = Counts(line, ROOT)
    usage = LAYOUTS[layout].read(counts, on_line)
    problem = counts.problem or on_line.problem
    if problem is None:
        ids = len(prompt.token_ids) if prompt.token_ids is not None else None
        problem = check(usage, ids, LAYOUTS[layout].fields)
    if problem is not None:
        return problem
    text = None if usage.output_tokens is not None else _response_text(reply)
    return Request(prompt, usage, text)


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
        given = rows["request_given"].to_pylist() if request is None else [True] * rows.num_rows
        reasons = rows["reason"].to_pylist()
        details = rows["detail"].to_pylist()
        read: list[Request | None] = [None] * rows.num_rows
        tops = [rows[f"top_{key}"].to_pylist() for key in LINE_KEYS]
        columns = zip(reasons, rows["body"].to_pylist(), rows["response"].to_pylist(), strict=True)
        for i, (reason, body, resp) in enumerate(columns):
            if reason is not None:
                continue
            at = request or ("request" if given[i] not in (None, "null") else ROOT)
            try:
                line = {k: loads(t[i]) for k, t in zip(LINE_KEYS, tops, strict=True) if t[i]}
                parsed = line, loads(body), None if resp is None else loads(resp)
            except RecursionError:  # DuckDB read it; Python's parser has a depth limit
                reasons[i], details[i] = "invalid_json", "the line nests too deeply to read"
                continue
            got = read_request(*parsed, options, at)
            if isinstance(got, Problem):
                reasons[i], details[i] = got.reason, got.detail
            else:
                read[i] = got
        rows = rows.drop_columns(
            ["body", "response", "reason", "detail"]
            + [f"top_{key}" for key in LINE_KEYS]
            + (["request_given"] if request is None else [])
        )
        rows = rows.append_column("reason", pa.array(reasons, pa.string())).append_column(
            "detail", pa.array(details, pa.string())
        )
        if "tenant" not in rows.column_names:
            rows = rows.append_column("tenant", pa.array([options.tenant] * rows.num_rows))
        return finish_requests(rows, read, options, options.block_size or self.default_block_size)


def finish_requests(
    rows: pa.Table, read: Sequence[Request | None], options: IngestOptions, block_size: int
) -> pa.Table:
    """Stage rows from parsed ``rows`` (``line``, ``reason``, ``detail``, ``arrival_us``,
    ``tenant``, ...) and each accepted row's :class:`Request` (None where rejected): prompts
    restructured (``--move-to-end``), rendered and tokenized, counts kept, full blocks hashed.
    A pattern that runs too long is that row's ``restructure_timeout``, a template that fails
    its ``template_error``; a prompt of no tokens is ``out_of_range``."""
    template = (
        Path(options.chat_template).read_text("utf-8")
        if options.chat_template
        else DEFAULT_CHAT_TEMPLATE
    )
    encode = _tokenizer(options.tokenizer) if options.tokenizer else fallback_encode
    reasons = rows["reason"].to_pylist()
    details = rows["detail"].to_pylist()
    token_ids: list[list[int] | None] = [None] * rows.num_rows
    prompts: list[str] = []
    where: list[int] = []
    replies: list[tuple[int, str]] = []
    for i, got in enumerate(read):
        if got is None or reasons[i] is not None:
            continue
        if got.prompt.token_ids is not None:
            token_ids[i] = list(got.prompt.token_ids)
        else:
            try:
                prompt = move_to_end(got.prompt, options.move_to_end)
            except RestructureTimeout:
                reasons[i] = "restructure_timeout"
                details[i] = f"a --move-to-end pattern ran past {TIMEOUT_S:g} s on a message"
                continue
            try:
                prompts.append(render(prompt, template))
                where.append(i)
            except Exception as exc:  # noqa: BLE001 -- any template failure is this row's reject
                reasons[i] = "template_error"
                details[i] = f"the prompt could not be rendered ({type(exc).__name__})"
                continue
        if got.reply_text is not None:
            replies.append((i, got.reply_text))
    for i, ids in zip(where, encode(prompts), strict=True):
        token_ids[i] = ids
        if not ids:
            reasons[i], details[i] = "out_of_range", "the prompt renders to no tokens"
    outputs = [None if g is None else g.usage.output_tokens for g in read]
    for (i, _), ids in zip(replies, encode([t for _, t in replies]), strict=True):
        outputs[i] = len(ids)
    del prompts, replies  # the text goes no further than this function
    ok = [r is None for r in reasons]

    def count(name: str) -> pa.Array:
        values = [
            getattr(g.usage, name) if g is not None and good else None
            for g, good in zip(read, ok, strict=True)
        ]
        return pa.array(values, pa.int64())

    rows = (
        rows.drop_columns(["reason", "detail"])
        .append_column("reason", pa.array(reasons, pa.string()))
        .append_column("detail", pa.array(details, pa.string()))
        .append_column("output_tokens", pa.array(outputs, pa.int64()))
        .append_column("reported_cached_tokens", count("cached_tokens"))
        .append_column("reported_prompt_tokens", count("prompt_tokens"))
        .append_column("reported_cache_creation_tokens", count("cache_creation_tokens"))
        .append_column(
            "token_ids",
            pa.array(
                [t if good else None for t, good in zip(token_ids, ok, strict=True)],
                pa.list_(pa.uint64()),
            ),
        )
    )
    return finish_token_rows(rows, options, block_size)

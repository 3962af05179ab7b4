"""The prompt of one logged request, read as its API sends it (docs/ingest.md#usage-layouts).

A body holds its prompt under one of these keys, tried in this order; the first present is the
prompt, the others are ignored:

- ``messages`` (OpenAI Chat, Anthropic Messages, LiteLLM): a list of ``{role, content}``;
  Anthropic's top-level ``system`` (a string or a list of text blocks) comes first, as a
  ``system`` message, the way the model reads it;
- ``input`` (OpenAI Responses): a string (one user message) or a list of items: messages
  (``{role, content}``, content a string or parts ``input_text``/``output_text``/...), other
  items (``function_call``, ``reasoning``...) as a placeholder; ``instructions`` comes first as
  a ``system`` message;
- ``prompt_token_ids`` (vLLM ``RequestOutput``) or ``input_ids`` (SGLang ``/generate``): the
  token ids themselves, hashed as they are (exact: no template, no tokenizer);
- ``prompt`` (completions, vLLM ``RequestOutput``) or ``text`` (SGLang ``/generate``): a string.

A content part that is not text becomes a placeholder such as ``<|image_url|>``. What is wrong
with a body is a reject reason and a message naming the field, never its value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefixscope.ingest.formats.paths import join_path

#: Text parts of every API: OpenAI Chat ``text``, Responses ``input_text``/``output_text``,
#: Anthropic ``text`` blocks. Their text is under ``text``.
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
#: The body keys a prompt is read from, in the order they are tried.
PROMPT_KEYS = ("messages", "input", "prompt_token_ids", "input_ids", "prompt", "text")
MAX_TOKEN_ID = 2**32 - 1


@dataclass(frozen=True)
class Prompt:
    """A prompt as chat messages to render, a string, or token ids taken as they are."""

    messages: tuple[dict[str, Any], ...] | None = None
    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    tools: Any = None


@dataclass(frozen=True)
class Problem:
    """Why a line is rejected: a reason code and a message that names fields, never values."""

    reason: str
    detail: str


def kind(value: Any) -> str:
    """The JSON type of a parsed value, in the words of DuckDB's ``json_type`` (as every other
    wrong_type message names types)."""
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "BIGINT"
    names = {float: "DOUBLE", str: "VARCHAR", list: "ARRAY", dict: "OBJECT"}
    return next((n for t, n in names.items() if isinstance(value, t)), "NULL")


def flatten_content(content: Any) -> str:
    """Message content as text: a string as it is; of a list of parts, the text parts' text
    and a placeholder per other part."""
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict) and part.get("type") in TEXT_PARTS:
                out.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                out.append(f"<|{part.get('type', 'part')}|>")
        return "".join(out)
    return "" if content is None else str(content)


def prompt_of(body: dict[str, Any], where: str) -> Prompt | Problem:
    """The prompt of the request ``body`` (found at the path ``where``)."""
    key = next((k for k in PROMPT_KEYS if body.get(k) is not None), None)
    if key is None:
        names = " or ".join(join_path(where, k) for k in ("messages", "input", "prompt"))
        return Problem("missing_field", f"missing or null: {names}")
    at = join_path(where, key)
    value = body[key]
    if key == "messages":
        if not isinstance(value, list):
            if isinstance(body.get("prompt"), str):  # a completion body with a stray field
                return Prompt(text=body["prompt"])
            return Problem("wrong_type", f"{at} is {kind(value)}, expected an array")
        first = _system(body.get("system"), join_path(where, "system"))
        if isinstance(first, Problem):
            return first
        messages = _messages(value, at)
        if isinstance(messages, Problem):
            return messages
        return Prompt(messages=first + messages, tools=_tools(body))
    if key == "input":
        return _responses_input(body, value, where)
    if key in ("prompt_token_ids", "input_ids"):
        return _token_ids(value, at)
    if not isinstance(value, str):
        return Problem("wrong_type", f"{at} is {kind(value)}, expected a string")
    return Prompt(text=value)


def _messages(value: list[Any], at: str) -> tuple[dict[str, Any], ...] | Problem:
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            where = join_path(at, str(i))
            return Problem("wrong_type", f"{where} is {kind(m)}, expected an object")
        if m.get("role") is None:
            return Problem("missing_field", f"missing or null: {join_path(at, str(i), 'role')}")
        out.append({**m, "content": flatten_content(m.get("content"))})
    return tuple(out)


def _system(value: Any, at: str) -> tuple[dict[str, Any], ...] | Problem:
    """Anthropic's top-level ``system``: a string or a list of text blocks; absent: nothing."""
    if value is None:
        return ()
    if not isinstance(value, str | list):
        return Problem("wrong_type", f"{at} is {kind(value)}, expected a string or an array")
    return ({"role": "system", "content": flatten_content(value)},)


def _responses_input(body: dict[str, Any], value: Any, where: str) -> Prompt | Problem:
    at = join_path(where, "input")
    first = _system(body.get("instructions"), join_path(where, "instructions"))
    if isinstance(first, Problem):
        return first
    if isinstance(value, str):
        return Prompt(messages=(*first, {"role": "user", "content": value}), tools=_tools(body))
    if not isinstance(value, list):
        return Problem("wrong_type", f"{at} is {kind(value)}, expected a string or an array")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            return Problem(
                "wrong_type", f"{join_path(at, str(i))} is {kind(item)}, expected an object"
            )
        if item.get("role") is not None:  # a message (its type "message" may be left out)
            items.append({"role": item["role"], "content": flatten_content(item.get("content"))})
        else:  # function_call, function_call_output, reasoning...: a placeholder
            items.append({"role": "tool", "content": f"<|{item.get('type', 'item')}|>"})
    return Prompt(messages=(*first, *items), tools=_tools(body))


def _token_ids(value: Any, at: str) -> Prompt | Problem:
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    ):
        what = kind(value) if not isinstance(value, list) else "an array holding a non-integer"
        return Problem("wrong_type", f"{at} is {what}, expected an array of token ids")
    if not value:
        return Problem("out_of_range", f"{at} is empty")
    if min(value) < 0 or max(value) > MAX_TOKEN_ID:
        return Problem("out_of_range", f"{at} holds an id below 0 or of 2**32 or more")
    return Prompt(token_ids=tuple(value))


def _tools(body: dict[str, Any]) -> Any:
    """The body's ``tools``, else ``model_parameters.tools`` (where LiteLLM's standard logging
    payload keeps the request's parameters)."""
    if body.get("tools") is not None:
        return body["tools"]
    parameters = body.get("model_parameters")
    return parameters.get("tools") if isinstance(parameters, dict) else None

"""What each API's usage object says about the prompt cache, with its own semantics applied
(docs/ingest.md#usage-layouts).

A :class:`Layout` is one API's usage: where its counts are and how they add up to the prompt.
Each reads the response object (``reply``) of one line, and the line itself, into a
:class:`Usage`: the prompt's tokens as the API counts them, the tokens it served from its
prefix cache, the tokens it wrote to it, and the output tokens. The arithmetic differs:

- OpenAI Chat (and vLLM's and SGLang's OpenAI servers, LiteLLM's normalized usage):
  ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens``;
- OpenAI Responses: ``input_tokens`` includes ``input_tokens_details.cached_tokens``;
- Anthropic Messages: ``input_tokens`` *excludes* the cached tokens; the prompt is
  ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
- OpenTelemetry GenAI: ``gen_ai.usage.input_tokens`` includes
  ``gen_ai.usage.cache_read.input_tokens`` (read by :mod:`otlp`, into the same record).

:func:`detect` names the layout of a line from its own keys; ``--layout`` names it for all.
A count that is no count (a string, a decimal, negative, 19 digits or more) is a reject naming
the field, as are cached tokens beyond the prompt the same usage reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefixscope.ingest.formats.paths import join_path
from prefixscope.ingest.formats.prompts import Problem, kind

#: Integer counts hold at most 18 digits, as every other integer field of ingest.
COUNT_LIMIT = 10**18


@dataclass(frozen=True)
class Usage:
    """One line's counts, NULL where the line does not give them. ``prompt_tokens`` is the
    whole prompt as the API counts it (Anthropic: the sum of its three fields)."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None
    output_tokens: int | None = None
    #: Whether ``cache_creation_tokens`` is part of ``prompt_tokens`` as the API counts it
    #: (so cached + created can never exceed it).
    creation_in_prompt: bool = True


class Counts:
    """Read integer counts from one object, each named by its path under ``base`` for
    messages; the first bad count is kept in :attr:`problem`."""

    def __init__(self, obj: Any, base: str, also: str | None = None) -> None:
        self.obj = obj if isinstance(obj, dict) else {}
        self.base, self.also = base, also
        self.problem: Problem | None = None

    def get(self, *keys: str) -> int | None:
        value: Any = self.obj
        for k in keys:
            value = value.get(k) if isinstance(value, dict) else None
        if value is None or self.problem is not None:
            return None
        label = self.label(keys)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem = Problem("wrong_type", f"{label} is {kind(value)}, expected an integer")
            return None
        if not math.isfinite(value) or abs(value) >= COUNT_LIMIT or value < 0:
            self.problem = Problem(
                "out_of_range", f"{label} is out of range (at least 0, at most 18 digits)"
            )
            return None
        if isinstance(value, float):
            self.problem = Problem("wrong_type", f"{label} is DOUBLE, expected an integer")
            return None
        return value

    def label(self, keys: tuple[str, ...]) -> str:
        """How messages name the count at ``keys``."""
        label = join_path(self.base, *keys)
        if self.also is not None:
            label += f" (or {join_path(self.also, *keys)})"
        return label


@dataclass(frozen=True)
class Layout:
    """One API's usage: ``read(reply counts, line counts)`` gives its :class:`Usage`."""

    name: str
    read: Callable[[Counts, Counts], Usage]
    #: Where the counts are, for the docs and the messages (paths under the reply).
    fields: str


def _chat(reply: Counts, line: Counts) -> Usage:
    cached = reply.get("usage", "prompt_tokens_details", "cached_tokens")
    if cached is None:  # LiteLLM's normalized usage also carries Anthropic's names
        cached = reply.get("usage", "cache_read_input_tokens")
    return Usage(
        prompt_tokens=reply.get("usage", "prompt_tokens"),
        cached_tokens=cached,
        cache_creation_tokens=reply.get("usage", "cache_creation_input_tokens"),
        output_tokens=reply.get("usage", "completion_tokens"),
    )


def _responses(reply: Counts, line: Counts) -> Usage:
    return Usage(
        prompt_tokens=reply.get("usage", "input_tokens"),
        cached_tokens=reply.get("usage", "input_tokens_details", "cached_tokens"),
        output_tokens=reply.get("usage", "output_tokens"),
    )


def _anthropic(reply: Counts, line: Counts) -> Usage:
    uncached = reply.get("usage", "input_tokens")
    read = reply.get("usage", "cache_read_input_tokens")
    created = reply.get("usage", "cache_creation_input_tokens")
    # input_tokens counts only what came after the last cache breakpoint: the prompt is the sum.
    parts = [p for p in (uncached, read, created) if p is not None]
    return Usage(
        prompt_tokens=sum(parts) if uncached is not None else None,
        cached_tokens=read,
        cache_creation_tokens=created,
        output_tokens=reply.get("usage", "output_tokens"),
    )


def _sglang(reply: Counts, line: Counts) -> Usage:
    return Usage(
        prompt_tokens=reply.get("meta_info", "prompt_tokens"),
        cached_tokens=reply.get("meta_info", "cached_tokens"),
        output_tokens=reply.get("meta_info", "completion_tokens"),
    )


def _vllm(reply: Counts, line: Counts) -> Usage:
    outputs = reply.obj.get("outputs")
    first = outputs[0] if isinstance(outputs, list) and outputs else None
    ids = first.get("token_ids") if isinstance(first, dict) else None
    prompt = reply.obj.get("prompt_token_ids")
    return Usage(
        prompt_tokens=len(prompt) if isinstance(prompt, list) else None,
        cached_tokens=reply.get("num_cached_tokens"),
        output_tokens=len(ids) if isinstance(ids, list) else None,
    )


def _litellm(reply: Counts, line: Counts) -> Usage:
    cached = line.get("metadata", "usage_object", "cache_read_input_tokens")
    if cached is None:
        cached = line.get("metadata", "usage_object", "prompt_tokens_details", "cached_tokens")
    return Usage(
        prompt_tokens=line.get("prompt_tokens"),
        cached_tokens=cached,
        cache_creation_tokens=line.get("metadata", "usage_object", "cache_creation_input_tokens"),
        output_tokens=line.get("completion_tokens"),
    )


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout("chat", _chat, "usage.prompt_tokens_details.cached_tokens"),
        Layout("responses", _responses, "usage.input_tokens_details.cached_tokens"),
        Layout("anthropic", _anthropic, "usage.cache_read_input_tokens"),
        Layout("sglang", _sglang, "meta_info.cached_tokens"),
        Layout("vllm", _vllm, "num_cached_tokens"),
        Layout("litellm", _litellm, "metadata.usage_object.cache_read_input_tokens"),
    )
}
AUTO = "auto"
#: What ``--layout`` takes.
LAYOUT_CHOICES = (AUTO, *LAYOUTS)


def detect(line: dict[str, Any], body: dict[str, Any], reply: Any) -> str | Problem:
    """The layout of one line, from its own keys (docs/ingest.md#usage-layouts):

    1. ``litellm``: the line has ``spend`` and ``request_id`` (a row of LiteLLM_SpendLogs);
    2. ``vllm``: the response has ``num_cached_tokens`` (a ``RequestOutput``);
    3. ``sglang``: the response has a ``meta_info`` object (native ``/generate``);
    4. a ``usage`` with ``prompt_tokens``: ``chat``;
    5. a ``usage`` with ``input_tokens``: ``responses`` if it has ``input_tokens_details`` or
       the response is ``"object": "response"``; ``anthropic`` if it has
       ``cache_read_input_tokens`` or ``cache_creation_input_tokens`` or the response is
       ``"type": "message"``; a line with marks of both is ``ambiguous_layout``; one with
       neither is ``responses`` when its body has ``input``, else ``anthropic``;
    6. no usage: ``responses`` when the body has ``input``, else ``chat``.
    """
    reply = reply if isinstance(reply, dict) else {}
    if line.get("spend") is not None and line.get("request_id") is not None:
        return "litellm"
    if "num_cached_tokens" in reply:
        return "vllm"
    if isinstance(reply.get("meta_info"), dict):
        return "sglang"
    usage = reply.get("usage")
    if isinstance(usage, dict) and usage.get("prompt_tokens") is not None:
        return "chat"
    if isinstance(usage, dict) and usage.get("input_tokens") is not None:
        responses = "input_tokens_details" in usage or reply.get("object") == "response"
        anthropic = (
            "cache_read_input_tokens" in usage
            or "cache_creation_input_tokens" in usage
            or reply.get("type") == "message"
        )
        if responses and anthropic:
            return Problem(
                "ambiguous_layout",
                "the usage has marks of both the Responses API (input_tokens_details, "
                "object: response) and Anthropic's (cache_read_input_tokens, type: message): "
                "name it with --layout",
            )
        if responses or anthropic:
            return "responses" if responses else "anthropic"
    if body.get("input") is not None:
        return "responses"
    if isinstance(usage, dict) and usage.get("input_tokens") is not None:
        return "anthropic"
    return "chat"


def check(usage: Usage, prompt_ids: int | None, cached_label: str) -> Problem | None:
    """Counts that contradict each other: cached tokens beyond the prompt the same line reports
    (its ``prompt_tokens``, or the token ids it carries), or cached and created tokens that
    together exceed a prompt that includes both."""
    total = usage.prompt_tokens if usage.prompt_tokens is not None else prompt_ids
    if total is None or usage.cached_tokens is None:
        return None
    if usage.cached_tokens > total:
        return Problem(
            "out_of_range",
            f"{cached_label} ({usage.cached_tokens:,}) exceeds the prompt's {total:,} tokens "
            "as the same line reports them",
        )
    created = usage.cache_creation_tokens or 0
    if usage.creation_in_prompt and usage.cached_tokens + created > total:
        return Problem(
            "out_of_range",
            f"cached ({usage.cached_tokens:,}) and cache-creation ({created:,}) tokens exceed "
            f"the prompt's {total:,} tokens as the same line reports them",
        )
    return None

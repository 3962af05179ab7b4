"""Prompt restructuring, what-if: what a pattern matches moved to the end of the prompt before
it is rendered and hashed (``ingest --move-to-end REGEX``, docs/ingest.md).

A prefix cache serves a prompt only up to its first changed token, so a timestamp or a request
id near the start of a system prompt makes every request's prompt new from there on, the
conversation's history after it included. Moving what varies to the end of the prompt, where
an operator would put it (in the last user message), and ingesting the same logs into a second
warehouse, measures what that restructuring would win (``prefixscope compare`` sets the two
side by side).

Every message's text (a chat message's content, or a completion's prompt) loses every
non-overlapping match of each pattern, in the order the patterns are given; the matches are
appended to the end of the last message, each on a line of its own, in the order they were
found (message by message). A prompt without a match is left as it is, byte for byte; since
every turn of a conversation loses the same matches from the same earlier messages, its
history stays a prefix of its next turn. Token ids (``prompt_token_ids``, ``input_ids``) are
taken as they are: they carry no text to move.

Patterns are the ``regex`` module's syntax (Python's ``re`` and more). Each is compiled once,
checked before any work: it must compile, be at most :data:`MAX_PATTERN` characters, and not
match the empty string (it would move nothing, everywhere). A pattern that takes longer than
:data:`TIMEOUT_S` on one message (catastrophic backtracking) makes that line a reject,
``restructure_timeout``, not a hung ingest.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import regex

from prefixscope.ingest.formats.prompts import Prompt

#: The longest pattern taken, in characters.
MAX_PATTERN = 1000
#: The most one pattern may take on one message, in seconds.
TIMEOUT_S = 1.0
#: What joins the moved matches to the message and to each other.
SEPARATOR = "\n"


class RestructureTimeout(Exception):
    """A pattern ran past :data:`TIMEOUT_S` on one message."""


def check_patterns(patterns: Sequence[str]) -> None:
    """ValueError, in one line naming the flag, for a pattern that cannot be used."""
    for pattern in patterns:
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        if not pattern:
            raise ValueError("--move-to-end needs a pattern, got an empty one")
        if len(pattern) > MAX_PATTERN:
            raise ValueError(
                f"--move-to-end {shown!r} is {len(pattern):,} characters; give at most "
                f"{MAX_PATTERN:,}"
            )
        try:
            compiled = _compiled(pattern)
        except regex.error as exc:
            raise ValueError(f"--move-to-end {shown!r} is not a pattern ({exc})") from None
        try:
            empty = compiled.fullmatch("", timeout=TIMEOUT_S) is not None
        except TimeoutError:
            empty = False
        if empty:
            raise ValueError(
                f"--move-to-end {shown!r} matches the empty string, so it would move nothing "
                "— give a pattern that matches at least one character"
            )


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


def _removed(text: str, patterns: Sequence[str], moved: list[str]) -> str:
    """``text`` without the matches of ``patterns``, each appended to ``moved``."""

    def take(match: Any) -> str:
        if match.group(0):
            moved.append(match.group(0))
        return ""

    for pattern in patterns:
        try:
            text = _compiled(pattern).sub(take, text, timeout=TIMEOUT_S)
        except TimeoutError:
            raise RestructureTimeout from None
    return text


def move_text(text: str, patterns: Sequence[str]) -> str:
    """``text`` with every match of ``patterns`` moved to its end (the module docstring)."""
    moved: list[str] = []
    rest = _removed(text, patterns, moved)
    return SEPARATOR.join([rest, *moved]) if moved else text


def move_to_end(prompt: Prompt, patterns: Sequence[str]) -> Prompt:
    """``prompt`` with every message's matches moved to the end of its last message; token ids
    and tools as they are."""
    if not patterns or prompt.token_ids is not None:
        return prompt
    if prompt.text is not None:
        return replace(prompt, text=move_text(prompt.text, patterns))
    if not prompt.messages:
        return prompt
    moved: list[str] = []
    messages = [
        {**m, "content": _removed(m["content"], patterns, moved)}
        if isinstance(m.get("content"), str)
        else m
        for m in prompt.messages
    ]
    if not moved:
        return prompt
    last = messages[-1]
    content = last["content"] if isinstance(last.get("content"), str) else ""
    messages[-1] = {**last, "content": SEPARATOR.join([content, *moved])}
    return replace(prompt, messages=tuple(messages))

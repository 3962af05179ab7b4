"""Field paths: where a flag says a field is (``--tenant-field meta.user``), parsed into keys.

A path is data, never SQL: it is parsed here into its keys, and the keys reach DuckDB only as a
bound parameter, the JSON Pointer (RFC 6901) of :func:`json_pointer`. The syntax
(docs/ingest.md#field-paths):

- ``.`` alone is the line itself (:data:`ROOT`);
- otherwise keys separated by dots: ``meta.user`` is the key ``user`` of the object ``meta``;
- a plain key is any printable text without ``.``, ``[``, ``]`` or ``"``: quotes, spaces,
  backslashes, SQL words and any script are read as they are (``user' || '`` is that key);
- any key may be written in brackets as a JSON string: ``meta["a.b"]``, ``["x\\"y"]``,
  ``["tab\\there"]``; that is how a key holding a dot, a bracket, a double quote or a control
  character is named. A bracket follows a key directly, or starts the path;
- no key is empty, and a path is at most :data:`MAX_PATH_CHARS` characters.

On an array, a key of digits picks that element (from 0), as JSON Pointer does.
"""

from __future__ import annotations

import json

#: The path of the line itself (``--request-field .``: the line is the request body).
ROOT = "."
#: The longest path accepted, in characters.
MAX_PATH_CHARS = 1000
#: Characters a plain key cannot hold: they separate keys or open a bracketed one.
_SPECIAL = frozenset('.[]"')
_SYNTAX = (
    "write keys separated by dots (meta.user), a key holding a dot, bracket or double quote "
    'in brackets as a JSON string (meta["a.b"])'
)


class PathError(ValueError):
    """A field path that does not parse; the message is one line, naming what is wrong."""


def parse_path(text: str, what: str = "the field path") -> tuple[str, ...]:
    """The keys of ``text``, outermost first; ``()`` for :data:`ROOT`. Raises PathError naming
    ``what`` (the flag) when ``text`` does not parse."""

    def fail(problem: str) -> PathError:
        shown = text if len(text) <= 60 else text[:60] + "…"
        return PathError(f"{what} {shown!r}: {problem} — {_SYNTAX}")

    if not isinstance(text, str):
        raise PathError(f"{what} is not text — {_SYNTAX}")
    if text == ROOT:
        return ()
    if not text:
        raise fail("the path is empty")
    if len(text) > MAX_PATH_CHARS:
        raise fail(f"longer than {MAX_PATH_CHARS} characters")
    keys: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == "[":
            key, i = _bracketed(text, i, fail)
        else:
            end = i
            while end < n and text[end] not in _SPECIAL:
                end += 1
            key = text[i:end]
            if not key:
                where = "at the end" if end == n else f"at character {end + 1}"
                raise fail(f"an empty key {where}")
            if not key.isprintable():
                raise fail('a key holds a control character: write it escaped, as ["a\\tb"]')
            i = end
        keys.append(key)
        if i == n:
            return tuple(keys)
        if text[i] == ".":
            i += 1
            if i < n and text[i] == "[":
                raise fail(f'a dot before a bracket at character {i}: write a["b"], not a.["b"]')
        elif text[i] != "[":
            raise fail(f"unexpected {text[i]!r} at character {i + 1}")


def _bracketed(text: str, start: int, fail) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    """The key of the bracket at ``text[start]`` and the index after its ``]``."""
    if not text.startswith('["', start):
        raise fail(f"a bracket at character {start + 1} must hold a key in double quotes")
    try:
        key, end = json.JSONDecoder().raw_decode(text, start + 1)
    except json.JSONDecodeError:
        raise fail(f"the quoted key at character {start + 2} is not a JSON string") from None
    if not isinstance(key, str) or not text.startswith("]", end):
        raise fail(f"the bracket at character {start + 1} is not closed after its key")
    if not key:
        raise fail(f"an empty key at character {start + 1}")
    return key, end + 1


def show_path(keys: tuple[str, ...]) -> str:
    """The path of ``keys`` as messages name it, in the syntax :func:`parse_path` reads back:
    plain keys where they can be, else bracketed (printable, on one line)."""
    if not keys:
        return ROOT
    out = []
    for key in keys:
        if key and key.isprintable() and not _SPECIAL & set(key):
            out.append(("." if out else "") + key)
        else:
            out.append("[" + json.dumps(key, ensure_ascii=not key.isprintable()) + "]")
    return "".join(out)


def join_path(base: str, *keys: str) -> str:
    """The path of ``keys`` under the path ``base`` (:data:`ROOT`: under the line itself)."""
    return show_path(parse_path(base) + keys)


def json_pointer(keys: tuple[str, ...]) -> str:
    """The JSON Pointer (RFC 6901) of ``keys``, as DuckDB's JSON functions take it: each key
    after a ``/``, with ``~`` written ``~0`` and ``/`` written ``~1``. ``()`` is ``$``."""
    if not keys:
        return "$"
    return "".join("/" + k.replace("~", "~0").replace("/", "~1") for k in keys)

"""Whole files refused while they are staged, before anything is written: a file of another
format (its first lines all fail on shape), and a file of which no line is accepted.

Both stop the command with one line naming the file, the commonest reason with its message,
any field flag whose path was found on no line, and what to check. A bad line never aborts a
run (it is a reject), but a file that yields no request at all is almost always the wrong
``--format``, a wrong field flag or a wrong ``--block-size``: publishing it would record a
source of nothing but rejects and exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats import IngestOptions
from prefixscope.ingest.formats.base import field_flag
from prefixscope.ingest.formats.paths import parse_path, show_path

#: Reject reasons that say "this line is not of the format" rather than "this value is bad".
SHAPE_REASONS = frozenset(
    {"invalid_utf8", "invalid_json", "not_an_object", "missing_field", "wrong_type"}
)
#: Reasons given before any field is looked at: such a line says nothing about a field.
_BEFORE_FIELDS = frozenset(
    {"blank_line", "line_too_long", "invalid_utf8", "invalid_json", "not_an_object"}
    | {"truncated_file"}
)
_MISSING = "missing or null: "
#: A file whose first this-many non-blank lines all fail on shape is not the format asked for.
SNIFF_LINES = 100


class FormatMismatch(ValueError):
    """The file is not the format asked for, or yields no request; nothing of it was written."""


def sniff(rows: pa.Table, path: Path, format_name: str, options: IngestOptions) -> None:
    """Fail fast, on a file's first batch, when none of its first SNIFF_LINES non-blank lines
    parses for ``format_name`` (every one fails on shape)."""
    head = _not_blank(rows).slice(0, SNIFF_LINES)
    reasons = head["reason"].to_pylist()
    if not reasons or any(r is None or r not in SHAPE_REASONS for r in reasons):
        return
    raise FormatMismatch(
        f"{path} does not look like {format_name}: none of its first {len(reasons)} lines "
        f"parsed (most often: {_commonest(head)}){_unfound(head, options)} — pick the right "
        "--format or field flags (docs/ingest.md#field-paths)"
    )


def refuse_if_none_accepted(
    stage: pa.Table, path: Path, format_name: str, options: IngestOptions
) -> None:
    """Stop when no line of the whole file is accepted. An empty file, or one of blank lines
    only, holds no request to refuse: it is published as zero lines."""
    if stage["reason"].null_count:
        return
    lines = _not_blank(stage)
    if lines.num_rows == 0:
        return
    raise FormatMismatch(
        f"{path}: none of its {lines.num_rows:,} lines was accepted as {format_name} (most "
        f"often: {_commonest(lines)}){_unfound(lines, options)} — check --format, the field "
        "flags and --block-size (docs/ingest.md); nothing was written"
    )


def _not_blank(rows: pa.Table) -> pa.Table:
    return rows.filter(pc.not_equal(pc.fill_null(rows["reason"], ""), "blank_line"))


def _commonest(rows: pa.Table) -> str:
    """``REASON, DETAIL`` of the commonest (reason, detail) among rejected ``rows``, with its
    count when it is not every row."""
    counts: dict[tuple[str, str], int] = {}
    for r, d in zip(rows["reason"].to_pylist(), rows["detail"].to_pylist(), strict=True):
        counts[(r, d or "")] = counts.get((r, d or ""), 0) + 1
    (reason, detail), n = max(counts.items(), key=lambda kv: kv[1])
    share = "" if n == rows.num_rows else f" on {n:,} of {rows.num_rows:,} lines"
    return f"{reason}, {detail}{share}" if detail else f"{reason}{share}"


def _unfound(rows: pa.Table, options: IngestOptions) -> str:
    """``; --X-field P was found on no line`` for each field flag whose path is missing from
    every line of ``rows`` that was read as an object (such a line is a ``missing_field``
    naming it; a line rejected before its fields were read says nothing)."""
    read = rows.filter(pc.invert(pc.is_in(rows["reason"], pa.array(sorted(_BEFORE_FIELDS)))))
    if read.num_rows == 0:
        return ""
    named: list[set[str]] = []
    for reason, detail in zip(read["reason"].to_pylist(), read["detail"].to_pylist(), strict=True):
        if reason != "missing_field" or not (detail or "").startswith(_MISSING):
            return ""
        named.append(set(detail[len(_MISSING) :].split(", ")))
    notes = []
    for name, path in options.fields:
        label = show_path(parse_path(path))
        if all(label in n for n in named):
            notes.append(f"; {field_flag(name)} {label} was found on no line")
    return "".join(notes)

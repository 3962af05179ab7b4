"""The warehouse's requests as a trace file that replay tools read: Mooncake's format (or
Bailian's), whatever log the requests were ingested from. No text leaves, because none is in
the warehouse; the 64-bit block hashes do not leave either: each export numbers its blocks
densely (``ids.py``).

What a re-ingest needs to replay the file as the warehouse replays its requests, to the token
(docs/export.md#round-trip): the same lookups in the same order (each request's ids, in replay
order, ties kept in line order), the same tokens per lookup (``input_length`` and the block
size, which the file does not carry: the command prints it, with the ingest that reads it back),
and the same last-block rule. Hash-id rows (mooncake, bailian) have ``ceil(input / block)`` ids,
the last one possibly partial: Mooncake's own rule. Token-source rows (openai, tokens) have
``floor(input / block)`` ids, and the engine always computes the last prompt token: written as
such, they are read back with ``ingest --format mooncake --full-blocks``. A file holds one rule,
so an export of both kinds of rows at once is refused.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import sql, warehouse
from prefixscope.analysis.trace.load import HASH_ID_FORMATS
from prefixscope.export.atomic import check_writable, write_lines
from prefixscope.export.ids import dense_ids


@dataclass(frozen=True)
class ExportSettings:
    format: str = "mooncake"
    out: str = "trace.jsonl.gz"
    #: Number the blocks by a keyed hash of this (``ids.py``); None: by first appearance.
    salt: str | None = None
    #: Only these tenants' requests; None: every request of the warehouse.
    tenants: tuple[str, ...] | None = None
    #: Write each request's session and previous turn (``session_id``, ``parent``; Bailian's
    #: ``parent_chat_id``). Off by default: a replay tool that reads them (AIPerf) replays a
    #: session as a chat that re-sends its earlier turns, which the prompts already hold.
    sessions: bool = False

    def check(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"no export format {self.format!r} — give one of {', '.join(sorted(FORMATS))}"
            )
        if self.salt is not None and not self.salt.strip():
            raise ValueError("--salt is empty — give a secret of your own, or leave --salt out")
        check_writable(Path(self.out))


@dataclass(frozen=True)
class ExportResult:
    out: Path
    format: str
    requests: int
    lookups: int
    blocks: int  # distinct ids written
    block_size: int
    full_blocks: bool  # token-source rows: ids of full blocks only, the last token computed
    tenants: int
    tails: int = 0  # ids written for partial tails of token-source rows (named by one line)

    def reingest(self, wh: str = "copy.duckdb") -> str:
        """The ingest that reads the file back as the warehouse holds it."""
        words = ["prefixscope", "ingest", "--format", self.format, "--input", str(self.out)]
        words += ["--warehouse", wh, "--block-size", str(self.block_size)]
        words += ["--tenant-field", "tenant"]
        if self.full_blocks:
            words.append("--full-blocks")
        return shlex.join(words)

    def replays(self) -> list[str]:
        """How the replay tools take the file (docs/export.md, "Which replay tools read the
        file"): each tool's command with the flags this file needs, the rest left to the user."""
        out, n = shlex.quote(str(self.out)), self.block_size
        kind = {"mooncake": "mooncake_trace", "bailian": "bailian_trace"}[self.format]
        lines = [
            f"AIPerf: aiperf profile --input-file {out} --custom-dataset-type {kind} "
            f"--isl-block-size {n} …"
        ]
        if self.format == "mooncake":
            data = (
                f"kind=mooncake,source.kind=json_file,source.path={self.out},"
                f"hash_id_block_size={n},time_scale=0.001"
            )
            lines.append(f"GuideLLM: guidellm run --data {shlex.quote(data)} …")
        return lines


@dataclass(frozen=True)
class Rows:
    """The exported requests, in replay order: columns as Python lists (what ``json`` takes),
    ids as CSR (``offsets`` into ``ids``)."""

    n: int
    block_size: int
    rel_us: list[int]  # µs after the first exported arrival
    input_tokens: list[int]
    output_tokens: list[int]  # at least 1: a request generates its first token (AIPerf refuses 0)
    tenants: list[str]
    sessions: list[str | None]  # s0, s1, … per export, by first appearance
    parents: list[int | None]  # the parent request's index in the export, when known
    turns: list[int | None]
    types: list[str | None]
    offsets: np.ndarray
    ids: np.ndarray
    #: Token-source rows: full blocks hashed, the last token always computed (each line says
    #: ``last_token_rule``; a partial tail's id is the line's own, ``_with_tails``).
    full_blocks: bool = False

    def hash_ids(self, i: int) -> list[int]:
        return self.ids[self.offsets[i] : self.offsets[i + 1]].tolist()


def export_trace(wh: str | Path, settings: ExportSettings) -> ExportResult:
    """Read the requests from a read-only connection, write the file atomically: the old file
    (if any) stays until the new one is whole. Writes nothing to the warehouse."""
    settings.check()
    with warehouse.reading(wh) as con:
        table = con.sql(
            sql.load("export/requests"),
            params={"tenants": list(settings.tenants) if settings.tenants else None},
        ).to_arrow_table()
    block_size, full_blocks = _one_rule(table, settings)
    rows = _rows(table, settings.salt, block_size)
    if not settings.sessions:
        rows = replace(rows, sessions=[None] * rows.n, parents=[None] * rows.n)
    if settings.format == "bailian" and not _prefix_chained(rows):
        raise ValueError(
            "some block id follows more than one parent, and Bailian's ids are chained on "
            "ingest, which would tell them apart — export this trace with --format mooncake"
        )
    out = Path(settings.out)
    blocks = int(rows.ids.max()) + 1 if len(rows.ids) else 0
    lookups = len(rows.ids)
    if full_blocks:
        rows = replace(_with_tails(rows), full_blocks=True)
    write_lines(out, FORMATS[settings.format](rows))
    return ExportResult(
        out=out,
        format=settings.format,
        requests=rows.n,
        lookups=lookups,
        blocks=blocks,
        block_size=block_size,
        full_blocks=full_blocks,
        tenants=len(set(rows.tenants)),
        tails=len(rows.ids) - lookups,
    )


def _with_tails(rows: Rows) -> Rows:
    """Token-source rows name full blocks only (their tails are never hashed). Each with a
    partial tail gets one more id, past every block's and named by no other line, so a replay
    tool that reads Mooncake's rule (an id per started block: GuideLLM refuses a line with
    fewer) sends every token; ``ingest --full-blocks`` leaves that id out again."""
    tokens = np.asarray(rows.input_tokens, np.int64)
    counts = np.diff(rows.offsets)
    tail = (tokens % rows.block_size != 0) & (counts == tokens // rows.block_size)
    if not tail.any():
        return rows
    offsets = np.concatenate(([0], np.cumsum(counts + tail))).astype(np.int64)
    ids = np.empty(int(offsets[-1]), np.int64)
    shift = np.repeat(offsets[:-1] - rows.offsets[:-1], counts)
    ids[np.arange(len(rows.ids)) + shift] = rows.ids
    first = int(rows.ids.max()) + 1 if len(rows.ids) else 0
    ids[offsets[1:][tail] - 1] = first + np.arange(int(tail.sum()))
    return replace(rows, offsets=offsets, ids=ids)


def _one_rule(table: pa.Table, settings: ExportSettings) -> tuple[int, bool]:
    """The export's one block size and last-block rule; refused when the rows mix them."""
    if table.num_rows == 0:
        whose = f" of tenant {', '.join(settings.tenants)}" if settings.tenants else ""
        raise ValueError(
            f"the warehouse holds no requests{whose} — ingest some first, or check --tenant"
        )
    sizes = pc.unique(table["block_size"]).to_pylist()
    if len(sizes) > 1:
        raise ValueError(
            f"the requests mix block sizes {sorted(sizes)}, and a trace has one — export each "
            "apart with --tenant"
        )
    rules = set(_last_token_rule(table).tolist())
    if len(rules) > 1:
        raise ValueError(
            "the requests mix hash-id rows (mooncake, bailian: a partial last block) and "
            "token-source rows (openai, tokens: full blocks only), and a trace has one rule — "
            "export each apart with --tenant"
        )
    full = rules == {True}
    if full and settings.format == "bailian":
        raise ValueError(
            "a Bailian trace holds a partial last block, and these requests (from token "
            "sources) hash full blocks only — export them with --format mooncake"
        )
    return int(sizes[0]), full


def _last_token_rule(table: pa.Table) -> np.ndarray:
    """Per row, as the trace loader reads it: the row's own rule, else its format's."""
    by_format = np.asarray(
        pc.invert(pc.is_in(table["format"], pa.array(HASH_ID_FORMATS))), dtype=bool
    )
    if "last_token_rule" not in table.column_names:
        return by_format
    own = table["last_token_rule"]
    return np.where(np.asarray(pc.is_null(own)), by_format, np.asarray(own.fill_null(False)))


def _rows(table: pa.Table, salt: str | None, block_size: int) -> Rows:
    hashes = table["block_hashes"].combine_chunks()
    offsets = np.asarray(hashes.offsets, dtype=np.int64)
    flat = np.asarray(hashes.flatten(), dtype=np.uint64)
    at = table["at_us"].to_numpy()
    chat = table["chat_id"].to_pylist()
    index_of = {c: i for i, c in enumerate(chat) if c is not None}
    return Rows(
        n=table.num_rows,
        block_size=block_size,
        rel_us=(at - at.min()).tolist(),
        input_tokens=table["input_tokens"].to_pylist(),
        output_tokens=pc.max_element_wise(table["output_tokens"].fill_null(1), 1).to_pylist(),
        tenants=table["tenant"].to_pylist(),
        sessions=_dense(table["session_id"].to_pylist()),
        parents=[index_of.get(p) for p in table["parent_chat_id"].to_pylist()],
        turns=table["turn"].to_pylist(),
        types=table["request_type"].to_pylist(),
        offsets=offsets - offsets[0],
        ids=dense_ids(flat, salt),
    )


def _prefix_chained(rows: Rows) -> bool:
    """Every id follows one parent (or none) wherever it appears: ids that name their whole
    prefix, as chained hashes do (a Mooncake trace's own ids need not)."""
    starts = rows.offsets[:-1][np.diff(rows.offsets) > 0]
    before = np.empty_like(rows.ids)
    before[1:] = rows.ids[:-1]
    before[starts] = -1
    pairs = np.unique((before + 1) * (int(rows.ids.max(initial=0)) + 1) + rows.ids)
    return len(pairs) == len(np.unique(rows.ids))


def _dense(values: list[str | None]) -> list[str | None]:
    """Session ids renamed ``s0``, ``s1``, … in order of first appearance (a log's own ids may
    name users); strings, as replay tools type them; NULL stays unknown."""
    seen: dict[str, str] = {}
    return [None if v is None else seen.setdefault(v, f"s{len(seen)}") for v in values]


def _time(us: int, per: int) -> int | float:
    """``us`` microseconds in units of ``per`` µs: an integer when whole."""
    return us // per if us % per == 0 else us / per


def mooncake_lines(rows: Rows) -> Iterator[str]:
    """``timestamp`` (ms after the first request), ``input_length``, ``output_length``,
    ``hash_ids``; ``block_size`` (tokens an id covers, the field the KVCache.AI simulator reads)
    and ``tenant`` always; ``last_token_rule`` (true) for token-source rows; ``session_id`` and
    ``parent`` (the line number, from 0, of the previous turn) when known and asked for."""
    for i in range(rows.n):
        line: dict[str, object] = {
            "timestamp": _time(rows.rel_us[i], 1_000),
            "input_length": rows.input_tokens[i],
            "output_length": rows.output_tokens[i],
            "hash_ids": rows.hash_ids(i),
            "block_size": rows.block_size,
            "tenant": rows.tenants[i],
        }
        if rows.full_blocks:
            line["last_token_rule"] = True
        if rows.sessions[i] is not None:
            line["session_id"] = rows.sessions[i]
        if rows.parents[i] is not None:
            line["parent"] = rows.parents[i]
        yield json.dumps(line)


def bailian_lines(rows: Rows) -> Iterator[str]:
    """Bailian's fields (``prefixscope/ingest/formats/bailian.py``): ``chat_id`` (the line
    number, from 0), ``parent_chat_id`` (the previous turn's, -1 when none is known),
    ``timestamp`` (seconds after the first request), ``input_length``, ``output_length``,
    ``type`` (``text`` when unknown), ``turn`` (1 when unknown), ``hash_ids``; and ``tenant``,
    ``session_id`` as for Mooncake. The ids are the blocks' dense ids, each naming a block with
    its whole prefix; Bailian's chaining on ingest keeps them apart exactly as the hashes were."""
    for i in range(rows.n):
        parent = rows.parents[i]
        line: dict[str, object] = {
            "chat_id": i,
            "parent_chat_id": -1 if parent is None else parent,
            "timestamp": _time(rows.rel_us[i], 1_000_000),
            "input_length": rows.input_tokens[i],
            "output_length": rows.output_tokens[i],
            "type": rows.types[i] or "text",
            "turn": rows.turns[i] or 1,
            "hash_ids": rows.hash_ids(i),
            "tenant": rows.tenants[i],
        }
        if rows.sessions[i] is not None:
            line["session_id"] = rows.sessions[i]
        yield json.dumps(line)


#: Export formats by name: each turns the rows into lines of text.
FORMATS: dict[str, Callable[[Rows], Iterator[str]]] = {
    "mooncake": mooncake_lines,
    "bailian": bailian_lines,
}

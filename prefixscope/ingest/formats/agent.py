"""Coding-agent traces as published (``--format agent-json``): one JSON object per conversation,
the layout of kv-cache-tester's ``traces/`` (callanjfox/kv-cache-tester, Apache-2.0, at
94f6046; ``docs/trace_replay_tester.md``): ``id``, ``block_size``, ``hash_id_scope``
(``local``: ids unique within the conversation; ``global``: across conversations) and
``requests``, each with ``t`` (seconds from the conversation's start), ``type``, ``model``,
``in``, ``out``, ``hash_ids`` (one content id per *full* block), ``stop``, ``api_time`` and
``think_time``; an entry of ``type: subagent`` holds a sub-agent's own ``requests``, timed from
its start ``t``.

One input row is one request; a conversation that cannot be read or decoded is one row, and an
entry of it that breaks a rule is one row (its sub-agent's requests with it when the entry is a
sub-agent's), so the counts add up. Each conversation is a session (its ``id``); a sub-agent is
a child session (``<id>/<agent_id>``) whose ``parent_session_id`` is its parent's. Blocks are
keyed by model: a request's first block carries the salt ``xxh64(model ␟ id)`` (``local``) or
``xxh64(model)`` (``global``), so a request on another model never hits a block of the first,
and one on the same model may. A partial last block has no id and no hash; the engine always
computes the prompt's last token (the rule of token sources, ``last_token_rule``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats.agent_inputs import Member, open_conversations
from prefixscope.ingest.formats.arrival import Arrival
from prefixscope.ingest.formats.base import (
    MAX_BLOCK_SIZE,
    IngestOptions,
    conform,
    mark_rejected,
    seconds_to_arrival,
)
from prefixscope.ingest.hashing import chain_id_groups, salt_of
from prefixscope.ingest.lines import FileReadState

_Id = Annotated[int, msgspec.Meta(ge=0)]  # and under 2**64, checked when stored
_Seconds = Annotated[float, msgspec.Meta(ge=0)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


class _Conversation(msgspec.Struct):
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | int
    block_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_BLOCK_SIZE)]
    requests: list[msgspec.Raw]
    hash_id_scope: Literal["local", "global"] = "local"


class _Entries(msgspec.Struct):
    requests: list[msgspec.Raw]


class _Entry(msgspec.Struct):
    """A request, or (``type: subagent``) a sub-agent's marker with its own requests."""

    t: _Seconds
    type: str = ""
    model: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    input_tokens: Annotated[int, msgspec.Meta(ge=1, le=2**62)] | None = msgspec.field(
        default=None, name="in"
    )
    out: _Count | None = None
    hash_ids: list[_Id] | None = None
    stop: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    api_time: _Seconds | None = None
    think_time: _Seconds | None = None
    agent_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    requests: list[msgspec.Raw] | None = None


_CONVERSATION = msgspec.json.Decoder(_Conversation)
_ENTRIES = msgspec.json.Decoder(_Entries)
_ENTRY = msgspec.json.Decoder(_Entry)
#: Requests per yielded batch, and the most block ids in one (its list offsets are int32).
ROWS_PER_BATCH = 4096
IDS_PER_BATCH = 32 << 20
#: Sub-agents within sub-agents, at most (a deeper marker is one reject).
MAX_DEPTH = 16
#: A request's required fields (a sub-agent's marker needs ``requests`` instead).
REQUIRED = ("model", "in", "out", "hash_ids")


@dataclass(frozen=True)
class AgentJson:
    name: str = "agent-json"
    default_block_size: int = 64

    def batches(self, path: Path, state: FileReadState) -> Iterator[pa.Table]:
        conversations = open_conversations(path)
        rank = {name: i for i, name in enumerate(conversations.names)}
        rows = _Rows(state, len(conversations.names))
        for member in conversations.read(state):
            rows.conversation(member, rank.get(member.name, 0))
            if rows.full():
                yield rows.flush()
        if conversations.truncated is not None and not conversations.cut:
            state.lines += 1  # the unreadable rest: one line, marked by the loader
            state.truncated = (state.lines, conversations.truncated)
        if rows.pending():
            yield rows.flush()

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        del con  # everything was decoded while reading; the rules here are array work
        rows = batch
        trace_bs = np.asarray(rows["trace_block_size"].fill_null(0), dtype=np.int64)
        ok = np.asarray(pc.is_null(rows["reason"]).to_numpy(zero_copy_only=False), dtype=bool)
        bs = options.block_size or self.default_block_size
        other = ok & ((trace_bs <= 0) | (bs % np.maximum(trace_bs, 1) != 0))
        if other.any():
            rows = mark_rejected(
                rows, other, "block_size_mismatch",
                f"the conversation's blocks do not divide the ingest's {bs}-token blocks "
                "(the first conversation's size, or --block-size: a multiple of the trace's)",
            )  # fmt: skip
        ids = rows["ids"].combine_chunks()
        counts = np.asarray(pc.list_value_length(ids).fill_null(0), dtype=np.int64)
        tokens = np.asarray(rows["input_tokens"].fill_null(0), dtype=np.int64)
        safe_bs = np.maximum(trace_bs, 1)
        full = tokens // safe_bs
        ok = np.asarray(pc.is_null(rows["reason"]).to_numpy(zero_copy_only=False), dtype=bool)
        wrong = ok & (counts != full) & (counts != -(-tokens // safe_bs))
        if wrong.any():
            rows = mark_rejected(
                rows, wrong, "block_count_mismatch",
                "len(hash_ids) is neither in // block_size (the full blocks) nor one more",
            )  # fmt: skip
            ok &= ~wrong
        hashes = _hashes(rows, ids, ok, np.minimum(counts, full), bs, safe_bs)
        first, total = options.arrival_base
        own = int(rows["conversations"][0].as_py()) if rows.num_rows else 0
        starts = Arrival.parse(options.arrival, options.arrival_seed).starts(total or own)
        rank = first + np.asarray(rows["rank"].fill_null(0), dtype=np.int64)
        at = starts[rank] if len(starts) else np.zeros(rows.num_rows)
        rows = rows.append_column("at_s", pa.array(at + np.asarray(rows["t_s"].fill_null(0.0))))
        rows, arrival = seconds_to_arrival(rows, "at_s", options)
        rows = _placed(rows, batch)
        n = rows.num_rows
        return conform(
            pa.table(
                {
                    "line": rows["line"],
                    "reason": rows["reason"],
                    "detail": rows["detail"],
                    "arrival_ts": arrival,
                    "tenant": pa.array([options.tenant] * n, pa.string()),
                    "session_id": rows["session_id"],
                    "parent_session_id": rows["parent_session_id"],
                    "log_request_id": rows["log_request_id"],
                    "input_tokens": rows["input_tokens"],
                    "output_tokens": rows["output_tokens"],
                    "block_size": pa.array(np.full(n, bs, np.int32)),
                    "block_hashes": hashes,
                    "model": rows["model"],
                    "stop_reason": rows["stop_reason"],
                    "api_time_s": rows["api_time_s"],
                    "think_time_s": rows["think_time_s"],
                    "last_token_rule": pa.array(np.ones(n, bool)),
                }
            )
        )


def _hashes(
    rows: pa.Table,
    ids: pa.ListArray,
    ok: np.ndarray,
    keep: np.ndarray,
    bs: int,
    trace_bs: np.ndarray,
) -> pa.ListArray:
    """Each accepted row's first ``keep`` ids chained into ``bs``-token blocks under its salt
    (model, and the conversation when its ids are local); rejected rows get none."""
    keep = np.where(ok, keep, 0)
    offsets = np.asarray(ids.offsets, dtype=np.int64)
    values = np.asarray(ids.flatten(), dtype=np.uint64)
    lengths = np.diff(offsets)
    position = np.arange(len(values)) - np.repeat(offsets[:-1] - offsets[0], lengths)
    kept = values[position < np.repeat(keep, lengths)]
    salts = _salts(rows)
    group = np.where(ok, bs // trace_bs, 1)
    sizes = np.unique(group[ok]) if ok.any() else np.array([1])
    results = []
    for g in sizes:  # one size in any real input; rows of another size keep no id in this pass
        mine = np.where(group == g, keep, 0)
        picked = kept[np.repeat(group == g, keep)]
        h_offsets, h = chain_id_groups(
            np.concatenate(([0], np.cumsum(mine))), picked, int(g), salts
        )
        results.append((group == g, h_offsets, h))
    if len(results) == 1:
        _, h_offsets, h = results[0]
        return pa.ListArray.from_arrays(
            pa.array(h_offsets.astype(np.int32)), pa.array(h, pa.uint64())
        )
    counts = np.zeros(rows.num_rows, np.int64)
    for mask, h_offsets, _ in results:
        counts[mask] = np.diff(h_offsets)[mask]
    pieces = []
    for r in range(rows.num_rows):  # several sizes: rows merged one by one (rare)
        for mask, h_offsets, h in results:
            if mask[r]:
                pieces.append(h[h_offsets[r] : h_offsets[r + 1]])
    flat = np.concatenate(pieces) if pieces else np.zeros(0, np.uint64)
    out = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(out), pa.array(flat, pa.uint64()))


def _placed(rows: pa.Table, batch: pa.Table) -> pa.Table:
    """``rows`` with the message of each reject judged here (not while reading) prefixed by
    where its request is: the conversation's file and the entry."""
    new = pc.and_(pc.is_null(batch["reason"]), pc.is_valid(rows["reason"]))
    if not pc.any(new).as_py():
        return rows
    prefixed = pc.binary_join_element_wise(rows["place"], rows["detail"], ": ")
    detail = pc.if_else(new, prefixed, rows["detail"])
    return rows.set_column(rows.schema.get_field_index("detail"), "detail", detail)


def _salts(rows: pa.Table) -> np.ndarray:
    """Per row, the salt of its model (and conversation, for local ids): one hash per pair."""
    keys = rows["salt_key"].to_pylist()
    memo: dict[str, np.uint64] = {}
    return np.array(
        [memo.setdefault(k, salt_of(k)) if k is not None else 0 for k in keys], np.uint64
    )


class _Rows:
    """Rows of one batch under construction: one per request, or per entry or conversation
    that breaks a rule; ``line`` numbers them through the whole input."""

    def __init__(self, state: FileReadState, conversations: int) -> None:
        self.state = state
        self.conversations = conversations
        self.columns: dict[str, list[object]] = {k: [] for k in _COLUMNS}
        self.ids: list[np.ndarray] = []
        self.n_ids = 0
        self.seen: set[str] = set()  # the conversation ids read so far (``str`` of each)

    def full(self) -> bool:
        return len(self.ids) >= ROWS_PER_BATCH or self.n_ids >= IDS_PER_BATCH

    def pending(self) -> bool:
        return bool(self.ids)

    def add(self, ids: np.ndarray | None = None, **values: object) -> None:
        self.state.lines += 1
        values["line"] = self.state.lines
        for k, column in self.columns.items():
            column.append(values.get(k))
        array = ids if ids is not None else np.zeros(0, np.uint64)
        self.ids.append(array)
        self.n_ids += len(array)

    def reject(self, rank: int, reason: str, detail: str) -> None:
        self.add(rank=rank, reason=reason, detail=detail[:400])

    def flush(self) -> pa.Table:
        lengths = np.fromiter((len(a) for a in self.ids), np.int64, len(self.ids))
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        flat = np.concatenate(self.ids) if self.ids else np.zeros(0, np.uint64)
        table = pa.table(
            {
                **{k: pa.array(v, _COLUMNS[k]) for k, v in self.columns.items()},
                "ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.uint64())),
                "conversations": pa.array(np.full(len(self.ids), self.conversations, np.int64)),
            }
        )
        self.columns = {k: [] for k in _COLUMNS}
        self.ids, self.n_ids = [], 0
        return table

    def conversation(self, member: Member, rank: int) -> None:
        where = _shown(member.name)
        if member.data is None:
            self.reject(
                rank, member.reason or "unreadable_conversation", f"{where}: {member.problem}"
            )
            return
        try:
            head = _CONVERSATION.decode(member.data)
        except (msgspec.DecodeError, RecursionError) as exc:
            reason, message = _judged(exc)
            try:  # the entries decode: each is a row, all rejected for their conversation
                entries = _ENTRIES.decode(member.data).requests
            except (msgspec.DecodeError, RecursionError):
                entries = [None]
            for _ in entries:
                self.reject(rank, reason, f"{where}: {message}")
            return
        conversation = str(head.id)
        if conversation in self.seen:  # its sessions, request ids and salts would be another's
            for _ in head.requests:
                why = f"{where}: the conversation id was seen earlier in this input"
                self.reject(rank, "duplicate_conversation", why)
            return
        self.seen.add(conversation)
        local = head.hash_id_scope == "local"
        scope = _Scope(rank, where, conversation, head.block_size, local, conversation, None)
        self.entries(head.requests, scope)

    def entries(self, raws: list[msgspec.Raw], scope: _Scope) -> None:
        used: set[str] = set()
        for k, raw in enumerate(raws, start=1):
            at = f"{scope.where}, {scope.session} entry {k}"
            try:
                entry = _ENTRY.decode(raw)
            except (msgspec.DecodeError, RecursionError) as exc:
                self.reject(scope.rank, *_with_place(_judged(exc), at))
                continue
            if entry.type == "subagent":
                if entry.requests is None:
                    self.reject(scope.rank, "missing_field", f"{at}: missing or null: requests")
                    continue
                if scope.depth >= MAX_DEPTH:
                    why = f"{at}: sub-agents nested more than {MAX_DEPTH} deep"
                    self.reject(scope.rank, "out_of_range", why)
                    continue
                name = (
                    entry.agent_id
                    if entry.agent_id and entry.agent_id not in used
                    else f"subagent-{k}"
                )
                used.add(name)
                child = _Scope(
                    scope.rank, scope.where, f"{scope.session}/{name}", scope.block_size,
                    scope.local, scope.conversation, scope.session, scope.t_s + entry.t,
                    scope.depth + 1,
                )  # fmt: skip
                self.entries(entry.requests, child)
                continue
            missing = [f for f in REQUIRED if _value(entry, f) is None]
            if missing:
                self.reject(
                    scope.rank, "missing_field", f"{at}: missing or null: {', '.join(missing)}"
                )
                continue
            assert entry.hash_ids is not None and entry.model is not None
            try:
                ids = np.array(entry.hash_ids, np.uint64)
            except OverflowError:
                self.reject(scope.rank, "out_of_range", f"{at}: a hash id is 2**64 or more")
                continue
            salt = f"{entry.model}\x1f{scope.conversation}" if scope.local else entry.model
            self.add(
                ids,
                place=at,
                rank=scope.rank,
                session_id=scope.session,
                parent_session_id=scope.parent,
                log_request_id=f"{scope.session}#{k}",
                trace_block_size=scope.block_size,
                t_s=scope.t_s + entry.t,
                model=entry.model,
                input_tokens=entry.input_tokens,
                output_tokens=entry.out,
                stop_reason=entry.stop,
                api_time_s=entry.api_time,
                think_time_s=entry.think_time,
                salt_key=salt,
            )


@dataclass(frozen=True)
class _Scope:
    """Where entries are read: the conversation, the session (a sub-agent's own), its start."""

    rank: int
    where: str
    session: str
    block_size: int
    local: bool
    conversation: str
    parent: str | None
    t_s: float = 0.0
    depth: int = 0


_COLUMNS: dict[str, pa.DataType] = {
    "line": pa.int64(),
    "reason": pa.string(),
    "detail": pa.string(),
    "place": pa.string(),
    "rank": pa.int64(),
    "session_id": pa.string(),
    "parent_session_id": pa.string(),
    "log_request_id": pa.string(),
    "trace_block_size": pa.int64(),
    "t_s": pa.float64(),
    "model": pa.string(),
    "input_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    "stop_reason": pa.string(),
    "api_time_s": pa.float64(),
    "think_time_s": pa.float64(),
    "salt_key": pa.string(),
}


def _value(entry: _Entry, field: str) -> object:
    return entry.input_tokens if field == "in" else getattr(entry, field)


def _judged(exc: Exception) -> tuple[str, str]:
    """The reject reason and message of msgspec's error (it names fields and types, never a
    value): not JSON, not an object, a field missing, mistyped or out of its range."""
    if isinstance(exc, RecursionError):
        return "invalid_json", "JSON nested too deep to read"
    text = " ".join(str(exc).split())[:300]
    if not isinstance(exc, msgspec.ValidationError):  # (a ValidationError is a DecodeError)
        return "invalid_json", text
    if text.startswith("Expected `object`") and "- at" not in text:
        return "not_an_object", text
    if text.startswith("Object missing required field"):
        return "missing_field", text
    if "Invalid enum value" in text:
        return "out_of_range", "hash_id_scope must be local or global"
    if "`str` of length" in text or ">=" in text or "<=" in text or "out of range" in text:
        return "out_of_range", text
    return "wrong_type", text


def _with_place(judged: tuple[str, str], at: str) -> tuple[str, str]:
    return judged[0], f"{at}: {judged[1]}"


def _shown(name: str) -> str:
    """A member's name for a message: printable, at most 120 characters."""
    shown = name.encode("utf-8", "backslashreplace").decode("utf-8")
    shown = "".join(c if c.isprintable() else "?" for c in shown)
    return shown if len(shown) <= 120 else shown[:117] + "..."

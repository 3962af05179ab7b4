"""An agent trace's conversations decoded into rows (``--format agent-json``, ``agent.py``):
one row per request, or per conversation or entry that breaks a rule, numbered through the
whole input (``line``); the requests' block ids as Arrow lists, not yet chained. Decoding is
msgspec's, against typed structures, so a field of the wrong type or range is named in its
message without its value."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec
import numpy as np
import pyarrow as pa

from prefixscope.ingest.formats.agent_inputs import Member
from prefixscope.ingest.formats.base import MAX_BLOCK_SIZE
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


class Rows:
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

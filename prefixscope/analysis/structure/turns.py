"""Conversation turns: each request's parent (the previous turn of its conversation), its turn
number and its session, from the log where it says so, inferred from the block chains where not.

Inference (docs/structure.md). The parent of B is the latest earlier request A of the same
tenant such that

1. A's *full* blocks are all a leading run of B's blocks (with chained hashes: A's last full
   block is B's block at the same position). A's partial last block, if any, is left out: it
   changes once A's answer is appended to the conversation;
2. B is longer than A (``input_tokens``): a re-sent prompt is not its own next turn;
3. among such A, the deepest match wins, then the latest;
4. A's last full block is not a *fork*: at most ``max_forks`` distinct full blocks follow it
   anywhere in the trace. A conversation is a chain (one continuation after each turn); a shared
   system prompt is a fork (every session continues it differently), so a request whose full
   blocks are only a shared prompt is nobody's parent.

A request without a parent starts a session (turn 1); otherwise it inherits its parent's
session and its turn is the parent's plus one. Parents are always earlier, so one pass in replay
order settles both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from prefixscope.analysis.structure.scan import Scan, full_blocks, scan
from prefixscope.analysis.trace.csr import Trace

NONE = -1
#: Default of rule 4: a parent's last full block may be followed by two distinct full blocks (a
#: conversation and one branch of it); measured in docs/structure.md.
MAX_FORKS = 2
#: Rule 2 may skip this many later, not shorter, requests ending at the same block before it
#: gives up on a position (keeps the pass linear in the number of lookups).
_MAX_SKIPS = 8


@dataclass(frozen=True)
class LogIds:
    """What a log says of conversations, per request in replay order. ``chat_id`` and
    ``parent_chat_id`` are -2 where the log has none (-1 is Bailian's "first turn");
    ``turn`` 0 where none; ``session`` a dense code per log session id, -1 where none."""

    chat_id: np.ndarray  # int64
    parent_chat_id: np.ndarray  # int64
    turn: np.ndarray  # int32
    session: np.ndarray  # int64

    @staticmethod
    def empty(n: int) -> LogIds:
        return LogIds(
            np.full(n, -2, np.int64),
            np.full(n, -2, np.int64),
            np.zeros(n, np.int32),
            np.full(n, -1, np.int64),
        )

    @property
    def has_chat(self) -> np.ndarray:
        return self.parent_chat_id >= -1

    @property
    def has_session(self) -> np.ndarray:
        return self.session >= 0


@dataclass(frozen=True)
class Turns:
    """Per request in replay order. ``session`` is the replay index of the session's first
    request in the warehouse. Invariants: ``parent < index``, same tenant, ``turn`` of a request
    with a parent = its parent's + 1 (when inferred)."""

    parent: np.ndarray  # int64, NONE when the request starts a session (or its parent is absent)
    turn: np.ndarray  # int32, from 1
    session: np.ndarray  # int64
    parent_inferred: np.ndarray  # bool
    turn_inferred: np.ndarray  # bool
    session_inferred: np.ndarray  # bool
    history_blocks: np.ndarray  # int32: leading blocks B shares with its parent (0: no parent)
    inferred: np.ndarray  # int64: the inferred parent (rules 1-4), also where the log names one


def fork_counts(trace: Trace) -> np.ndarray:
    """Per dense id, how many distinct *full* blocks follow it in any request."""
    return scan(trace).forks.astype(np.int64)


def infer_parents(
    trace: Trace, max_forks: int = MAX_FORKS, scanned: Scan | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Rules 1–4 of the module docstring: per request the inferred parent (NONE: none) and the
    number of leading blocks it shares with it (``scanned``: :func:`scan.scan`, if at hand)."""
    if trace.n_requests == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    s = scanned or scan(trace)
    return _infer(
        trace.offsets,
        trace.blocks,
        s.key,
        s.n_keys,
        full_blocks(trace),
        trace.input_tokens,
        s.forks,
        int(max_forks),
    )


def chain(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Turn numbers and session roots of a parent forest whose parents come first."""
    return _chain(np.asarray(parent, np.int64))


def build_turns(
    trace: Trace,
    log: LogIds | None = None,
    max_forks: int = MAX_FORKS,
    scanned: Scan | None = None,
) -> Turns:
    """Parents, turns and sessions: from the log where it has them (Bailian chat ids first,
    then a session id column), inferred elsewhere."""
    n = trace.n_requests
    log = log or LogIds.empty(n)
    inferred, _ = infer_parents(trace, max_forks, scanned)
    logged = logged_parents(log)
    by_log = log.has_chat | log.has_session
    parent = np.where(by_log, logged, inferred)
    turn, root = chain(parent)
    # Bailian rows keep the log's own turn number (a parent may lie outside the warehouse).
    turn = np.where(log.has_chat & (log.turn > 0), log.turn, turn).astype(np.int32)
    history = common_prefix(trace, parent)
    return Turns(
        parent=parent,
        turn=turn,
        session=root,
        parent_inferred=~by_log,
        turn_inferred=~(log.has_chat & (log.turn > 0)) & ~log.has_session,
        session_inferred=~by_log,
        history_blocks=history,
        inferred=inferred,
    )


def logged_parents(log: LogIds) -> np.ndarray:
    """Parents the log names: the request whose chat id is the row's parent chat id; for a
    session id column, the previous request of the same session. NONE elsewhere."""
    n = len(log.chat_id)
    parent = np.full(n, NONE, np.int64)
    chat = np.flatnonzero(log.has_chat & (log.chat_id >= 0))
    if len(chat):
        order = np.argsort(log.chat_id[chat], kind="stable")
        ids = log.chat_id[chat][order]
        want = np.flatnonzero(log.has_chat & (log.parent_chat_id >= 0))
        at = np.searchsorted(ids, log.parent_chat_id[want])
        at = np.minimum(at, len(ids) - 1)
        found = ids[at] == log.parent_chat_id[want]
        candidate = chat[order][at]
        ok = found & (candidate < want)  # a parent is earlier; a later one is a log error
        parent[want[ok]] = candidate[ok]
    rows = np.flatnonzero(~log.has_chat & log.has_session)
    if len(rows):
        order = np.lexsort((rows, log.session[rows]))
        sorted_rows = rows[order]
        same = np.r_[False, log.session[sorted_rows][1:] == log.session[sorted_rows][:-1]]
        parent[sorted_rows[same]] = sorted_rows[np.flatnonzero(same) - 1]
    return parent


def common_prefix(trace: Trace, parent: np.ndarray) -> np.ndarray:
    """Per request, the leading blocks it shares with ``parent`` (0 where there is none)."""
    return _common(trace.offsets, trace.blocks, np.asarray(parent, np.int64))


def link_accuracy(truth: np.ndarray, inferred: np.ndarray) -> tuple[int, int, int]:
    """(true links, inferred links, links in both) for two parent arrays; precision is
    ``both / inferred``, recall ``both / true``."""
    true_links, guessed = truth >= 0, inferred >= 0
    both = int(np.sum(true_links & guessed & (truth == inferred)))
    return int(true_links.sum()), int(guessed.sum()), both


@numba.njit(cache=True)
def _infer(offsets, blocks, key, n_keys, full, tokens, forks, max_forks):  # type: ignore[no-untyped-def]
    n = len(full)
    latest = np.full(n_keys, NONE, np.int32)  # per (tenant, block): latest request ending there
    previous = np.full(n, NONE, np.int32)  # per request: the one ending there before it
    parent = np.full(n, NONE, np.int64)
    shared = np.zeros(n, np.int32)
    for b in range(n):
        start = offsets[b]
        # Rule 3: walk B's full blocks deepest first; the first position with a candidate wins.
        for p in range(full[b] - 1, -1, -1):
            a = latest[key[start + p]]
            skips = 0
            while a != NONE and tokens[a] >= tokens[b] and skips < _MAX_SKIPS:
                a = previous[a]
                skips += 1
            if a != NONE and tokens[a] < tokens[b]:
                if forks[blocks[start + p]] <= max_forks:  # rule 4
                    parent[b] = a
                    shared[b] = p + 1
                break
        if full[b] > 0:
            k = key[start + full[b] - 1]
            previous[b] = latest[k]
            latest[k] = b
    return parent, shared


@numba.njit(cache=True)
def _chain(parent):  # type: ignore[no-untyped-def]
    n = len(parent)
    turn = np.ones(n, np.int32)
    root = np.arange(n).astype(np.int64)
    for i in range(n):
        a = parent[i]
        if a != NONE:
            turn[i] = turn[a] + 1
            root[i] = root[a]
    return turn, root


@numba.njit(cache=True)
def _common(offsets, blocks, parent):  # type: ignore[no-untyped-def]
    n = len(parent)
    out = np.zeros(n, np.int32)
    for b in range(n):
        a = parent[b]
        if a == NONE:
            continue
        la, lb = offsets[a + 1] - offsets[a], offsets[b + 1] - offsets[b]
        k = 0
        while k < la and k < lb and blocks[offsets[a] + k] == blocks[offsets[b] + k]:
            k += 1
        out[b] = k
    return out

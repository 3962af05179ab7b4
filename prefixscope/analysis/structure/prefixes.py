"""Shared prefixes: the prefixes that many *sessions* start with (system prompts, few-shot
blocks, tool schemas), as opposed to one conversation re-sending its own history.

A shared prefix ends at a block that at least two sessions look up and whose children are each
looked up by fewer sessions: the point where sessions part ways. Prefixes are ranked by
sessions, then by length (deeper first), then by requests. ``--pin-top K`` pins the first K of
this ranking (computed over the first half of the trace, see :mod:`pins`), and the
``shared_prefixes`` table lists it over the whole trace: one definition, one function.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.structure import _kernels
from prefixscope.analysis.structure.scan import Scan, scan
from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class Ranking:
    """Prefix ends (dense ids), best first, with the sessions and requests that use each."""

    ends: np.ndarray  # int64
    sessions: np.ndarray  # int64
    requests: np.ndarray  # int64


def depth(trace: Trace) -> np.ndarray:
    """Per dense id, its 0-based position (a chained hash always sits at the same depth)."""
    return scan(trace).depth.astype(np.int64)


def distinct_users(
    trace: Trace, owner: np.ndarray, measured: np.ndarray | None = None
) -> np.ndarray:
    """Per dense id, how many distinct ``owner`` values (per request) look it up among the
    ``measured`` requests (default: all)."""
    owner = np.asarray(owner, np.int64)
    rows = np.arange(trace.n_requests) if measured is None else np.flatnonzero(measured)
    order = rows[np.argsort(owner[rows], kind="stable")]
    count = _kernels.by_owner(trace.offsets, trace.blocks, order, owner, trace.n_unique, False)[0]
    return count.astype(np.int64)


def rank(
    trace: Trace,
    session: np.ndarray,
    measured: np.ndarray | None = None,
    sessions: np.ndarray | None = None,
    scanned: Scan | None = None,
) -> Ranking:
    """Every shared prefix of the ``measured`` requests (default: all), best first.
    ``sessions``: :func:`distinct_users` of ``session`` over them, and ``scanned``:
    :func:`scan.scan`, where already at hand."""
    if sessions is None:
        sessions = distinct_users(trace, session, measured)
    s = scanned or scan(trace)
    if measured is None:
        uses = s.requests
    else:
        uses = distinct_users(trace, np.arange(trace.n_requests), measured)
    child_max = _kernels.child_max(s.parent, sessions)
    ends = np.flatnonzero((sessions >= 2) & (child_max < sessions))
    order = np.lexsort(
        (
            -uses[ends].astype(np.int64),
            -s.depth[ends].astype(np.int64),
            -sessions[ends].astype(np.int64),
        )
    )
    ends = ends[order]
    return Ranking(
        ends.astype(np.int64), sessions[ends].astype(np.int64), uses[ends].astype(np.int64)
    )


@dataclass(frozen=True)
class PrefixUse:
    """Who uses one prefix end, over the whole trace."""

    requests: np.ndarray  # replay indices of the requests that look it up, ascending
    tenants: tuple[str, ...]
    tokens: int  # length of the prefix


def uses(trace: Trace, ends: np.ndarray, at_depth: np.ndarray | None = None) -> list[PrefixUse]:
    """For each of ``ends`` (distinct), the requests that look it up, their tenants and its
    length (``at_depth``: :func:`depth`, where already at hand)."""
    which = np.full(trace.n_unique, -1, np.int32)
    which[ends] = np.arange(len(ends))
    starts, requests, tail = _kernels.users_of(
        trace.offsets, trace.blocks, trace.input_tokens, trace.block_size, which, len(ends)
    )
    at_depth = depth(trace) if at_depth is None else at_depth
    out = []
    for i, end in enumerate(ends):
        users = requests[starts[i] : starts[i + 1]]
        codes = np.unique(trace.tenant_codes[users])
        last = int(tail[i]) if len(users) else trace.block_size
        out.append(
            PrefixUse(
                requests=users,
                tenants=tuple(trace.tenants[c] for c in codes),
                tokens=int(at_depth[end]) * trace.block_size + last,
            )
        )
    return out

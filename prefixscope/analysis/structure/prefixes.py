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
from prefixscope.analysis.trace.csr import Trace, block_tokens


@dataclass(frozen=True)
class Ranking:
    """Prefix ends (dense ids), best first, with the sessions and requests that use each."""

    ends: np.ndarray  # int64
    sessions: np.ndarray  # int64
    requests: np.ndarray  # int64


def depth(trace: Trace) -> np.ndarray:
    """Per dense id, its 0-based position (a chained hash always sits at the same depth)."""
    return _kernels.first_parents(trace.offsets, trace.blocks, trace.n_unique)[1]


def distinct_users(
    trace: Trace, owner: np.ndarray, measured: np.ndarray | None = None
) -> np.ndarray:
    """Per dense id, how many distinct ``owner`` values (per request) look it up among the
    ``measured`` requests (default: all)."""
    owner = np.asarray(owner, np.int64)
    rows = np.arange(trace.n_requests) if measured is None else np.flatnonzero(measured)
    order = rows[np.argsort(owner[rows], kind="stable")]
    return _kernels.by_owner(trace.offsets, trace.blocks, order, owner, trace.n_unique, False)[0]


def rank(
    trace: Trace,
    session: np.ndarray,
    measured: np.ndarray | None = None,
    sessions: np.ndarray | None = None,
) -> Ranking:
    """Every shared prefix of the ``measured`` requests (default: all), best first.
    ``sessions``: :func:`distinct_users` of ``session`` over them, where already counted."""
    if sessions is None:
        sessions = distinct_users(trace, session, measured)
    requests = np.arange(trace.n_requests)
    uses = distinct_users(trace, requests, measured)
    parent, at_depth = _kernels.first_parents(trace.offsets, trace.blocks, trace.n_unique)
    child_max = np.zeros(trace.n_unique, dtype=np.int64)
    has_parent = parent >= 0
    np.maximum.at(child_max, parent[has_parent], sessions[has_parent])
    ends = np.flatnonzero((sessions >= 2) & (child_max < sessions))
    order = np.lexsort((-uses[ends], -at_depth[ends], -sessions[ends]))
    ends = ends[order]
    return Ranking(ends.astype(np.int64), sessions[ends], uses[ends])


@dataclass(frozen=True)
class PrefixUse:
    """Who uses one prefix end, over the whole trace."""

    requests: np.ndarray  # replay indices of the requests that look it up, ascending
    tenants: tuple[str, ...]
    tokens: int  # length of the prefix


def uses(trace: Trace, ends: np.ndarray) -> list[PrefixUse]:
    """For each of ``ends``, the requests that look it up, their tenants and its length."""
    wanted = np.zeros(trace.n_unique, bool)
    wanted[ends] = True
    hit = np.flatnonzero(wanted[trace.blocks])
    request = np.searchsorted(trace.offsets, hit, side="right") - 1
    block = trace.blocks[hit]
    position = hit - trace.offsets[request]
    sizes = block_tokens(trace.input_tokens[request], position, trace.block_size)
    order = np.argsort(block, kind="stable")  # lookups, so requests, are ascending within
    block, request, sizes = block[order], request[order], sizes[order]
    bounds = np.searchsorted(block, ends), np.searchsorted(block, ends, side="right")
    at_depth = depth(trace)
    out = []
    for end, lo, hi in zip(ends, *bounds, strict=True):
        users = np.unique(request[lo:hi])
        codes = np.unique(trace.tenant_codes[users])
        tail = int(sizes[lo:hi].max()) if hi > lo else trace.block_size
        out.append(
            PrefixUse(
                requests=users,
                tenants=tuple(trace.tenants[c] for c in codes),
                tokens=int(at_depth[end]) * trace.block_size + tail,
            )
        )
    return out

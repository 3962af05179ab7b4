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

from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class Ranking:
    """Prefix ends (dense ids), best first, with the sessions and requests that use each."""

    ends: np.ndarray  # int64
    sessions: np.ndarray  # int64
    requests: np.ndarray  # int64


def depth(trace: Trace) -> np.ndarray:
    """Per dense id, its 0-based position (a chained hash always sits at the same depth)."""
    out = np.zeros(trace.n_unique, dtype=np.int64)
    position = np.arange(trace.n_lookups) - trace.offsets[trace.request_of_lookup]
    out[trace.blocks] = position
    return out


def distinct_users(trace: Trace, owner: np.ndarray, lookups: np.ndarray) -> np.ndarray:
    """Per dense id, how many distinct ``owner`` values (per request) look it up among
    ``lookups`` (indices into the lookups)."""
    who = owner[trace.request_of_lookup[lookups]].astype(np.int64)
    pairs = np.unique(who * trace.n_unique + trace.blocks[lookups])
    return np.bincount(pairs % trace.n_unique, minlength=trace.n_unique).astype(np.int64)


def rank(trace: Trace, session: np.ndarray, measured: np.ndarray | None = None) -> Ranking:
    """Every shared prefix of the ``measured`` requests (default: all), best first."""
    requests = np.arange(trace.n_requests)
    keep = np.ones(trace.n_requests, bool) if measured is None else np.asarray(measured, bool)
    lookups = np.flatnonzero(keep[trace.request_of_lookup])
    sessions = distinct_users(trace, np.asarray(session, np.int64), lookups)
    uses = distinct_users(trace, requests, lookups)
    child_max = np.zeros(trace.n_unique, dtype=np.int64)
    has_parent = trace.parent >= 0
    np.maximum.at(child_max, trace.parent[has_parent], sessions[has_parent])
    ends = np.flatnonzero((sessions >= 2) & (child_max < sessions))
    order = np.lexsort((-uses[ends], -depth(trace)[ends], -sessions[ends]))
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
    hit = np.flatnonzero(np.isin(trace.blocks, ends))
    block, request = trace.blocks[hit], trace.request_of_lookup[hit]
    order = np.lexsort((request, block))
    block, request, sizes = block[order], request[order], trace.token_sizes[hit][order]
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

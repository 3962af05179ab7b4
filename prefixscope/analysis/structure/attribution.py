"""Where hit tokens come from. Every hit block (a block in a request's leading run of cached
blocks, under some policy and capacity) is in exactly one class, decided in this order:

1. ``other_tenant``: the cached copy was inserted by another tenant (``Outcome.cross``: for
   ``ceiling`` the tenant of the first request that looked it up; for a bounded cache the one
   whose request inserted it this time round);
2. ``own_session``: an earlier request of the same session looked the block up (the session
   re-sending its own history);
3. ``shared_prefix``: anything else: a block this tenant's other sessions brought in.

Classes partition the hit blocks, and a block's tokens are counted as ``hit_tokens`` counts
them (``Trace.served_sizes``), so the three sums equal the hit tokens to the token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies import Outcome
from prefixscope.analysis.structure import _kernels
from prefixscope.analysis.trace.csr import Trace

CLASSES = ("own_session", "shared_prefix", "other_tenant")
NOT_A_HIT = -1


@dataclass(frozen=True)
class SessionUse:
    """One walk over the sessions: per dense id the distinct sessions that look it up (the
    shared-prefix ranking's count), per lookup whether an earlier request of the same session
    looked the block up (:func:`own_history`)."""

    sessions: np.ndarray  # int32, n_unique
    earlier: np.ndarray  # bool, n_lookups


def session_use(trace: Trace, session: np.ndarray) -> SessionUse:
    session = np.asarray(session, np.int64)
    order = np.argsort(session, kind="stable")
    count, earlier = _kernels.by_owner(
        trace.offsets, trace.blocks, order, session, trace.n_unique, True
    )
    return SessionUse(count, earlier)


def own_history(trace: Trace, session: np.ndarray) -> np.ndarray:
    """Per lookup: an earlier request of the same session looked this block up."""
    return session_use(trace, session).earlier


def classify(trace: Trace, session: np.ndarray, outcome: Outcome) -> np.ndarray:
    """Per lookup, the index of its class in :data:`CLASSES`, or ``NOT_A_HIT``."""
    request = trace.request_of_lookup
    position = np.arange(trace.n_lookups) - trace.offsets[request]
    hit = position < outcome.hit_blocks[request]
    cross = outcome.cross if len(outcome.cross) else np.zeros(trace.n_lookups, bool)
    cls = np.where(own_history(trace, session), 0, 1)
    cls = np.where(cross, 2, cls)
    return np.where(hit, cls, NOT_A_HIT).astype(np.int8)


def split_tokens(
    trace: Trace, session: np.ndarray, outcome: Outcome, earlier: np.ndarray | None = None
) -> np.ndarray:
    """Hit tokens per request and class: int64 ``(n_requests, len(CLASSES))``, the tokens of
    :func:`classify` summed (``earlier``: :func:`own_history`, where already computed)."""
    if earlier is None:
        earlier = own_history(trace, session)
    return _kernels.class_tokens(
        trace.offsets,
        outcome.hit_blocks,
        outcome.cross,
        earlier,
        trace.servable_tokens,
        trace.block_size,
    )

"""A fleet run from a warm start (``trace/warm.py``): the warm-up requests are routed and
served like any, then left out of the outcome, so every table is of the measured requests.

What the outcome keeps of the warm-up: each replica's counters (busy seconds, steps, tokens,
preemptions and the time-weighted blocks) cover the whole replay, warm-up included; a cache
that filled during the warm-up counts as full from the first measured request."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from prefixscope.analysis.fleet.run import FleetOutcome, Traffic
from prefixscope.analysis.trace.warm import Warmed

#: The outcome's arrays of one row per request, in request order.
PER_REQUEST = (
    "arrival", "replica", "hit_blocks", "hit_tokens", "ttft", "first_start", "done_at",
    "source_tokens", "source_saved_s", "transfer_s", "no_cache_s", "preempted",
)  # fmt: skip


def warm_traffic(warmed: Warmed, traffic: Traffic) -> Traffic:
    """``traffic`` for the replayed trace: a warm-up request of the events' answers one token
    and names no session; a first window's requests are the log's own."""
    extra = warmed.trace.n_requests - len(traffic.output_tokens)
    if extra == 0:
        return traffic
    out = np.concatenate([np.ones(extra, np.int64), np.asarray(traffic.output_tokens, np.int64)])
    sessions = None if traffic.sessions is None else [None] * extra + list(traffic.sessions)
    return Traffic(out, sessions)


def measured_outcome(o: FleetOutcome, n: int) -> FleetOutcome:
    """``o`` without its first ``n`` requests (the warm-up)."""
    if n == 0:
        return o
    changes: dict = {k: getattr(o, k)[n:] for k in PER_REQUEST}  # type: ignore[type-arg]
    changes["miss"] = None if o.miss is None else o.miss[n:]
    changes["filled_at"] = np.where(o.filled_at >= n, o.filled_at - n, np.minimum(o.filled_at, 0))
    changes["stopped_at"] = o.stopped_at if o.stopped_at < 0 else max(o.stopped_at - n, 0)
    return replace(o, **changes)

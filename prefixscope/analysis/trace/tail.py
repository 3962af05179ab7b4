"""The most recent stretch of a trace: its last whole requests that hold at most a given number
of block lookups, with their own dense ids.

Stages that simulate the trace many times over for figures that are rates in time (a fleet's
hit rate, load and TTFT under every router; the value of the next GiB per hour of traffic)
measure them on such a stretch when the whole trace is larger than they can afford. The stretch
is contiguous, so its arrival rates, queueing and cache contents are the log's own over that
time, from a cold start like any run (each stage measures from its steady start); the stages
that need every lookup (``simulate``, the exact curve, ``structure``) always take the whole.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from prefixscope.analysis.trace.csr import Trace


def tail_start(trace: Trace, max_lookups: int | None) -> int:
    """The first request of the stretch: 0 when the whole trace fits (or no bound is given);
    the last request at least, even when it alone holds more."""
    if max_lookups is None or trace.n_lookups <= max_lookups:
        return 0
    if max_lookups < 1:
        raise ValueError(f"the stretch must hold at least one lookup, not {max_lookups}")
    first = int(np.searchsorted(trace.offsets, trace.n_lookups - max_lookups, side="left"))
    return min(first, trace.n_requests - 1)


def tail(trace: Trace, first: int) -> Trace:
    """Requests ``first ..`` of ``trace``, renumbered (times from their own first arrival); the
    trace itself when ``first`` is 0."""
    if first == 0:
        return trace
    lo = int(trace.offsets[first])
    unique, dense = np.unique(trace.blocks[lo:], return_inverse=True)
    times = trace.times[first:]
    return replace(
        trace,
        offsets=trace.offsets[first:] - lo,
        blocks=dense.astype(np.int32).ravel(),
        input_tokens=trace.input_tokens[first:],
        tenant_codes=trace.tenant_codes[first:],
        n_unique=len(unique),
        times=times - times[0],
        hashes=trace.hashes[unique],
        request_ids=None if trace.request_ids is None else trace.request_ids[first:],
        start_s=trace.start_s + float(times[0]),
        last_token_rule=None if trace.last_token_rule is None else trace.last_token_rule[first:],
    )

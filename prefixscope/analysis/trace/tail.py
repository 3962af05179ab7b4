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

import numba
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
        sessions=None if trace.sessions is None else trace.sessions[first:],
    )


def span(trace: Trace, first: int, end: int, *, fresh: bool = False) -> Trace:
    """Requests ``first .. end - 1`` of ``trace`` with their own dense ids, numbered in the
    order they are first looked up, and times from their own first arrival; the trace itself
    when that is all of it (and not ``fresh``). ``fresh``: every lookup a block of its own
    (prefix caching off, ``plan/nocache.py``), each keeping its block's hash.

    One pass over the span's lookups and a table of the trace's ids, no sort and no thread
    pool, so it runs as fast in a forked worker (where polars' threads are not) as here. What
    a simulation of the span holds grows with the span, not with the trace."""
    if not 0 <= first < end <= trace.n_requests:
        raise ValueError(f"no requests in {first}..{end} of a trace of {trace.n_requests}")
    if first == 0 and end == trace.n_requests and not fresh:
        return trace
    lo, hi = int(trace.offsets[first]), int(trace.offsets[end])
    old = trace.blocks[lo:hi]
    if fresh:
        dense, ids = np.arange(hi - lo, dtype=np.int32), old
    else:
        dense, ids = by_first_lookup(old, trace.n_unique)
    times = trace.times[first:end]
    rule = trace.last_token_rule
    return replace(
        trace,
        offsets=trace.offsets[first : end + 1] - lo,
        blocks=dense,
        input_tokens=trace.input_tokens[first:end],
        tenant_codes=trace.tenant_codes[first:end],
        n_unique=len(ids),
        times=times - times[0],
        hashes=trace.hashes[ids],
        request_ids=None if trace.request_ids is None else trace.request_ids[first:end],
        start_s=trace.start_s + float(times[0]),
        last_token_rule=None if rule is None else rule[first:end],
        sessions=None if trace.sessions is None else trace.sessions[first:end],
    )


def by_first_lookup(blocks: np.ndarray, n_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """(each lookup's new id, the old id of each new one) for ``blocks`` (ids below ``n_ids``),
    new ids by first lookup. Its table is ``np.zeros``: the OS hands the pages over zeroed as
    they are first touched, so a few lookups pay for the ids they name, not for all ``n_ids``
    (a table filled with -1 for the week's 158 M ids took 0.53 s of a 2.3 s check task in a
    forked worker, more than the pass itself)."""
    return _first_seen(blocks, np.zeros(n_ids, np.int32))


@numba.njit(cache=True, nogil=True)
def _first_seen(blocks, slot):  # type: ignore[no-untyped-def]
    """(each lookup's new id, the old id of each new one): new ids by first lookup; ``slot``
    (every entry 0, none seen) maps an old id to its new one plus one meanwhile."""
    dense = np.empty(blocks.size, np.int32)
    order = np.empty(blocks.size, np.int32)
    n = 0
    for i in range(blocks.size):
        b = blocks[i]
        s = slot[b]
        if s == 0:
            order[n] = b
            n += 1
            s = n
            slot[b] = n
        dense[i] = s - 1
    return dense, order[:n].copy()

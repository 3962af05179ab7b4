"""Session-aware eviction: a block belongs to the session of the request that last touched it,
and whole sessions go first. Both evict only leaves (cached blocks with no cached child), so
the cache stays prefix-closed, and use no future knowledge.

- ``session``: the leaves of the least recently active session go first (a session is active
  when one of its requests arrives), ties by least recent touch: a session that is still
  talking keeps even the blocks its latest request did not touch.
- ``liveness``: a session is presumed gone once it has been quiet longer than its patience,
  ``max(60 s, 2 × the longest gap it has come back from)`` (60 s before it has come back at
  all); the leaves of gone sessions go first, the longest gone first (the earliest
  ``last activity + patience``), ties by least recent touch; when no session is gone, as
  ``session``. Judged from each session's own gaps so far.

A request without a session is a session of its own. Sessions are the log's (``Trace.sessions``:
an agent trace's conversations and sub-agents, a gateway log's ``--session-field``); a trace
without them makes every request its own session.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from prefixscope.analysis.policies._lists import NONE
from prefixscope.analysis.policies.base import BoundedPolicy, PolicyOptions
from prefixscope.analysis.trace.csr import Trace

#: liveness: the least patience, and how many times its longest gap a session may be quiet.
MIN_PATIENCE_S = 60.0
PATIENCE_FACTOR = 2.0


def session_of_request(trace: Trace) -> tuple[np.ndarray, int]:
    """Per request its session code, a request without one getting a code of its own; and the
    number of codes."""
    n = trace.n_requests
    if trace.sessions is None:
        return np.arange(n, dtype=np.int64), n
    codes = trace.sessions.astype(np.int64)
    named = int(codes.max()) + 1 if n else 0
    alone = codes < 0
    codes[alone] = named + np.arange(int(alone.sum()))
    return codes, named + int(alone.sum())


@dataclass(frozen=True)
class SessionLRU(BoundedPolicy):
    name: str = "session"
    label: str = "session-LRU"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        return _replay(trace, capacity, liveness=False)


@dataclass(frozen=True)
class Liveness(BoundedPolicy):
    name: str = "liveness"
    label: str = "session-liveness"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        return _replay(trace, capacity, liveness=True)


def _replay(trace: Trace, capacity: int, liveness: bool):  # type: ignore[no-untyped-def]
    n = trace.n_requests
    if trace.n_lookups >= 2**31 - 1 or n >= 2**31 - 1:
        raise ValueError("a trace of 2**31 block lookups or requests or more: split it")
    sessions, n_sessions = session_of_request(trace)
    longest = int(np.diff(trace.offsets).max()) if n else 0
    leaves = min(trace.n_unique, capacity + longest) + 1
    track = len(trace.tenants) > 1
    heap_rows = 2 * leaves + 16  # compacted when full: amortized O(1)
    return _loop(
        trace.offsets,
        trace.blocks,
        trace.tenant_codes,
        trace.parent,
        trace.times,
        sessions,
        capacity,
        liveness,
        track,
        np.zeros(trace.n_unique, np.int64),  # owner session
        np.zeros(trace.n_unique, np.int64),  # touch number; 0: not cached
        np.zeros(trace.n_unique, np.int32),  # cached children
        np.full(n_sessions, -1, np.int64),  # the request of its last activity
        np.zeros(n_sessions, np.float64),  # the time of it
        np.zeros(n_sessions, np.float64),  # the longest gap it came back from
        np.zeros((heap_rows, 2), np.float64),
        np.zeros(heap_rows, np.int64),
        np.zeros((heap_rows if liveness else 1, 2), np.float64),
        np.zeros(heap_rows if liveness else 1, np.int64),
        np.zeros(trace.n_unique, np.int64),  # a mark per block, for compaction
        np.zeros(trace.n_unique if track else 1, np.int32),
        np.zeros(n, np.int32),
        np.zeros(trace.n_lookups if track else 0, np.bool_),
    )


# --- a binary min-heap of ((key, touch), block) with lazy deletion -------------------------
# An entry is current while its block is a cached leaf whose key is the entry's. Keys only
# grow (a session's last activity and patience never fall, a touch number only rises), so a
# stale entry is never above its block's current one: popped, it is pushed again with the
# current key, and the first current entry at the root is the true minimum.


@numba.njit(inline="always")
def _less(ka, ta, kb, tb):  # type: ignore[no-untyped-def]
    return ka < kb or (ka == kb and ta < tb)


@numba.njit
def _sift_up(keys, blocks, i):  # type: ignore[no-untyped-def]
    k, t, b = keys[i, 0], keys[i, 1], blocks[i]
    while i > 0:
        up = (i - 1) >> 1
        if not _less(k, t, keys[up, 0], keys[up, 1]):
            break
        keys[i, 0], keys[i, 1], blocks[i] = keys[up, 0], keys[up, 1], blocks[up]
        i = up
    keys[i, 0], keys[i, 1], blocks[i] = k, t, b


@numba.njit
def _sift_down(keys, blocks, i, size):  # type: ignore[no-untyped-def]
    k, t, b = keys[i, 0], keys[i, 1], blocks[i]
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _less(keys[c + 1, 0], keys[c + 1, 1], keys[c, 0], keys[c, 1]):
            c += 1
        if not _less(keys[c, 0], keys[c, 1], k, t):
            break
        keys[i, 0], keys[i, 1], blocks[i] = keys[c, 0], keys[c, 1], blocks[c]
        i = c
    keys[i, 0], keys[i, 1], blocks[i] = k, t, b


@numba.njit
def _pop(keys, blocks, size):  # type: ignore[no-untyped-def]
    size -= 1
    keys[0, 0], keys[0, 1], blocks[0] = keys[size, 0], keys[size, 1], blocks[size]
    if size > 0:
        _sift_down(keys, blocks, 0, size)
    return size


@numba.njit
def _key(b, which, owner, last_r, last_t, gap):  # type: ignore[no-untyped-def]
    """Block ``b``'s current key: 0, (its session's last activity); 1, (the time its session
    is presumed gone)."""
    s = owner[b]
    if which == 0:
        return float(last_r[s])
    return last_t[s] + max(MIN_PATIENCE_S, PATIENCE_FACTOR * gap[s])


@numba.njit
def _push(keys, blocks, size, b, which, owner, touch, last_r, last_t, gap, children, mark, stamp):  # type: ignore[no-untyped-def]
    if size == blocks.size:  # full: keep one current entry per cached leaf, then heapify
        kept = 0
        for i in range(size):
            v = blocks[i]
            if touch[v] != 0 and children[v] == 0 and mark[v] != stamp:
                mark[v] = stamp
                keys[kept, 0] = _key(v, which, owner, last_r, last_t, gap)
                keys[kept, 1] = touch[v]
                blocks[kept] = v
                kept += 1
        size = kept
        for i in range(size // 2 - 1, -1, -1):
            _sift_down(keys, blocks, i, size)
    keys[size, 0] = _key(b, which, owner, last_r, last_t, gap)
    keys[size, 1] = touch[b]
    blocks[size] = b
    _sift_up(keys, blocks, size)
    return size + 1


@numba.njit
def _push_leaf(
    keys0, heap0, n0, keys1, heap1, n1, liveness, b,
    owner, touch, last_r, last_t, gap, children, mark, stamp,
):  # type: ignore[no-untyped-def]  # fmt: skip
    """A new or re-touched leaf ``b`` into the session heap, and the liveness heap when that
    policy runs; returns both sizes and the last compaction stamp used."""
    stamp += 1
    n0 = _push(keys0, heap0, n0, b, 0, owner, touch, last_r, last_t, gap, children, mark, stamp)
    if liveness:
        stamp += 1
        n1 = _push(keys1, heap1, n1, b, 1, owner, touch, last_r, last_t, gap, children, mark, stamp)
    return n0, n1, stamp


@numba.njit
def _settle(keys, blocks, size, which, owner, touch, last_r, last_t, gap, children, mark, stamp):  # type: ignore[no-untyped-def]
    """Pop stale entries until the root is current (or the heap is empty); a stale entry of a
    cached leaf goes back in with its current key."""
    while size > 0:
        b = blocks[0]
        if touch[b] == 0 or children[b] != 0:
            size = _pop(keys, blocks, size)
            continue
        k = _key(b, which, owner, last_r, last_t, gap)
        if keys[0, 0] == k and keys[0, 1] == touch[b]:
            return size
        size = _pop(keys, blocks, size)
        size = _push(
            keys, blocks, size, b, which, owner, touch, last_r, last_t, gap, children, mark, stamp
        )
    return size


@numba.njit(cache=True, nogil=True)
def _loop(
    offsets, blocks, tenants, parent, times, sessions, capacity, liveness, track,
    owner, touch, children, last_r, last_t, gap, keys0, heap0, keys1, heap1, mark,
    tenant_of, hits, cross,
):  # type: ignore[no-untyped-def]  # fmt: skip
    n = offsets.size - 1
    size = 0
    n0 = 0
    n1 = 0
    clock = 0
    stamp = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        s = sessions[r]
        now = times[r]
        if last_r[s] >= 0:
            gap[s] = max(gap[s], now - last_t[s])
        last_r[s] = r
        last_t[s] = now
        k = 0
        while start + k < end and touch[blocks[start + k]] != 0:
            if track:
                cross[start + k] = tenant_of[blocks[start + k]] != tenants[r]
            k += 1
        hits[r] = k
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            clock += 1
            if touch[b] == 0:
                size += 1
                if track:
                    tenant_of[b] = tenants[r]
                q = parent[b]
                if q != NONE:
                    children[q] += 1
            owner[b] = s
            touch[b] = clock
            if children[b] == 0:
                n0, n1, stamp = _push_leaf(
                    keys0, heap0, n0, keys1, heap1, n1, liveness, b,
                    owner, touch, last_r, last_t, gap, children, mark, stamp,
                )  # fmt: skip
        while size > capacity:
            v = NONE
            if liveness:
                stamp += 1
                n1 = _settle(
                    keys1, heap1, n1, 1, owner, touch, last_r, last_t, gap, children, mark, stamp
                )
                if n1 > 0 and keys1[0, 0] < now:
                    v = heap1[0]
            if v == NONE:
                stamp += 1
                n0 = _settle(
                    keys0, heap0, n0, 0, owner, touch, last_r, last_t, gap, children, mark, stamp
                )
                v = heap0[0]
            touch[v] = 0
            size -= 1
            q = parent[v]
            if q != NONE:
                children[q] -= 1
                if children[q] == 0 and touch[q] != 0:  # the parent is a leaf now
                    n0, n1, stamp = _push_leaf(
                        keys0, heap0, n0, keys1, heap1, n1, liveness, q,
                        owner, touch, last_r, last_t, gap, children, mark, stamp,
                    )  # fmt: skip
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at

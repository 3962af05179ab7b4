"""The compiled replay loops of lru over a linked list and a ring. Every kernel follows
the same request cycle (docs/simulation.md):

1. (ttl) drop blocks idle longer than the ttl;
2. look up the leading run of cached blocks; mark which hits another tenant inserted;
3. touch the request's blocks, deepest first (a global touch sequence number orders every use:
   deeper blocks of a request get smaller numbers, so they go first among equals);
4. evict, by the policy's rule, while more than ``capacity`` blocks are cached.

Each returns ``(hit_blocks int32[n_requests], cross bool[n_lookups], filled_at)``: ``filled_at``
is the first request after which the cache held ``capacity`` blocks (-1: never).
"""

from __future__ import annotations

import numba
import numpy as np

NONE = -1
#: The latest log position of a cached pinned block: after every real position (positions are
#: int32 and stay below 2**31 - 1 for the traces ``LRU`` accepts).
PINNED_AT = np.int32(2**31 - 1)


@numba.njit(inline="always")
def _lookup(blocks, start, end, cached, owner, tenant, cross, track):  # type: ignore[no-untyped-def]
    """The request's leading run of cached blocks; ``track``: each hit's lookup says in
    ``cross`` whether another tenant inserted its block."""
    k = 0
    while start + k < end and cached[blocks[start + k]]:
        if track:
            cross[start + k] = owner[blocks[start + k]] != tenant
        k += 1
    return k


# --- a doubly linked list over dense ids; `s` (= n_unique) is the sentinel -------------------


@numba.njit(inline="always")
def _unlink(nxt, prv, b):  # type: ignore[no-untyped-def]
    nxt[prv[b]] = nxt[b]
    prv[nxt[b]] = prv[b]


@numba.njit(inline="always")
def _push_back(nxt, prv, s, b):  # type: ignore[no-untyped-def]
    last = prv[s]
    nxt[last] = b
    prv[b] = last
    nxt[b] = s
    prv[s] = b


@numba.njit(cache=True, nogil=True)
def lru(offsets, blocks, tenants, times, n_unique, capacity, ttl, pinned):  # type: ignore[no-untyped-def]
    """LRU; with ``ttl >= 0`` blocks idle longer than ``ttl`` seconds are dropped first; blocks
    with ``pinned[b]`` never leave once cached (they count against the capacity)."""
    s = n_unique
    nxt = np.full(n_unique + 1, s, np.int32)
    prv = np.full(n_unique + 1, s, np.int32)
    cached = np.zeros(n_unique, np.bool_)
    owner = np.zeros(n_unique, np.int32)
    last_time = np.zeros(n_unique, np.float64)
    n = offsets.size - 1
    hits = np.zeros(n, np.int32)
    cross = np.zeros(blocks.size, np.bool_)
    size = 0
    filled_at = NONE
    for r in range(n):
        start, end, t = offsets[r], offsets[r + 1], times[r]
        if ttl >= 0:
            while nxt[s] != s and t - last_time[nxt[s]] > ttl:
                v = nxt[s]
                _unlink(nxt, prv, v)
                cached[v] = False
                size -= 1
        hits[r] = _lookup(blocks, start, end, cached, owner, tenants[r], cross, True)
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            last_time[b] = t
            if cached[b]:
                if pinned[b]:
                    continue
                _unlink(nxt, prv, b)
            else:
                cached[b] = True
                owner[b] = tenants[r]
                size += 1
                if pinned[b]:
                    continue
            _push_back(nxt, prv, s, b)
        while size > capacity and nxt[s] != s:
            v = nxt[s]
            _unlink(nxt, prv, v)
            cached[v] = False
            size -= 1
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at


def lru_plain(offsets, blocks, tenants, n_unique, capacity, track_owner, owner, pinned=None):  # type: ignore[no-untyped-def]
    """LRU, the same rule as :func:`lru` without idle times, on a touch log
    instead of a linked list. Every touch appends the block to the log at the next (virtual)
    position and records it as the block's latest; the log is then in LRU order, with stale
    entries (blocks touched again later) to skip, and a block is cached iff its latest position
    lies at or after the eviction head. The log is a ring of a few times the capacity: when a
    request would not fit, the live entries are copied, in order, to its end. So writes are
    sequential and the working memory stays small, which is what makes it fast on traces larger
    than the CPU caches. Owners (for cross-tenant hits) are tracked only when ``track_owner``,
    in ``owner`` (``rows.owners``).

    ``pinned`` (a mask over blocks, or None): a pinned block never leaves once cached and counts
    against the capacity, as in :func:`lru`. Its latest position is set past every position
    (:data:`PINNED_AT`), so it is always at or after the head: cached, never counted by the
    eviction walk (which counts only a block's latest entry), never copied by a compaction.
    Pins must fit (the caller checks): then while the cache is over capacity some unpinned
    block is live, and the walk ends.

    The arrays are allocated here, by numpy, not in the compiled loop: numpy asks the kernel
    for huge pages on large arrays, and on a trace of millions of distinct blocks the page
    faults of a plain allocation cost a quarter of the replay."""
    n = offsets.size - 1
    longest = int(np.diff(offsets).max()) if n else 0
    held = min(capacity, n_unique)  # a cache larger than the distinct blocks never evicts
    ring = 1  # room for 4x what can be live, or for every touch, whichever is less
    while ring < min(4 * (held + longest), blocks.size + longest + 1):
        ring *= 2
    has_pins = pinned is not None
    return _lru_plain_loop(
        offsets,
        blocks,
        tenants,
        capacity,
        track_owner,
        has_pins,
        np.asarray(pinned, np.bool_) if has_pins else np.zeros(1, np.bool_),
        np.zeros(n_unique, np.int32),  # latest virtual log position (0: never touched)
        np.empty(ring, np.int32),
        np.empty(held + longest, np.int32),
        owner,
        np.zeros(n, np.int32),
        np.zeros(blocks.size if track_owner else 0, np.bool_),  # empty: no other tenant
    )


@numba.njit(cache=True, nogil=True)
def _lru_plain_loop(
    offsets,
    blocks,
    tenants,
    capacity,
    track_owner,
    has_pins,
    pinned,
    latest,
    log,
    scratch,
    owner,
    hits,
    cross,
):  # type: ignore[no-untyped-def]
    n = offsets.size - 1
    mask = log.size - 1
    ring = log.size
    head = 1  # virtual positions start at 1
    tail = 1
    size = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        tenant = tenants[r]
        if tail - head + (end - start) > ring:  # compact: the live entries, in order, to the end
            live = 0
            for pos in range(head, tail):
                b = log[pos & mask]
                if latest[b] == pos:
                    scratch[live] = b
                    live += 1
            head = tail
            for j in range(live):
                b = scratch[j]
                log[(tail + j) & mask] = b
                latest[b] = tail + j
            tail += live
        # One pass, shallowest first: look up while the run lasts, and log every block into
        # this request's slots in reverse, so its deepest block is the least recent. A block
        # repeated in the request keeps its shallowest (latest) slot.
        top = tail + (end - start) - 1
        run = True
        k = 0
        for p in range(start, end):  # branch-free where it can be: hits are unpredictable
            b = blocks[p]
            slot = top - (p - start)
            old = latest[b]
            miss = old < head
            size += miss
            run &= not miss
            k += run
            if track_owner:
                if miss:
                    owner[b] = tenant
                elif run:
                    cross[p] = owner[b] != tenant
            latest[b] = PINNED_AT if has_pins and pinned[b] else max(old, slot)
            log[slot & mask] = b
        tail += end - start
        hits[r] = k
        while size > capacity:
            size -= latest[log[head & mask]] == head  # only a block's latest entry counts
            head += 1
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return hits, cross, filled_at

"""``pinned`` under many pin sets in one pass: the compiled loop behind
:func:`~prefixscope.analysis.policies.lru.pinned_hit_blocks_many`.

Every variant sees the same requests and so the same touches: the touch log and each block's
latest position (``_lists.lru_plain``) are shared, and a variant is only its own eviction head
and size. A block pinned in variant ``v`` is cached there once touched (its latest position is
set); any other block is cached in ``v`` iff its latest position lies at or after ``v``'s head.
``v``'s eviction walk counts only the latest entries of blocks it does not pin, so a pinned
block never leaves ``v`` and counts against its capacity, the ``pinned`` rule.

Most lookups are decided for every variant at once: a block pinned nowhere whose latest
position lies at or after every head is cached in all of them, one before every head in none.
Only the rest (a block near the eviction edge, or a pinned one) is decided variant by variant.
"""

from __future__ import annotations

import numba
import numpy as np

NONE = -1
STALE = -1  # a log entry whose block was touched again later


def pinned_sets(offsets, blocks, n_unique, capacity, pin_sets):  # type: ignore[no-untyped-def]
    """Per pin set (an array of dense ids, at most ``capacity`` of them; at most 64 sets), the
    leading run of cached blocks of every request under ``pinned``: int32
    ``(len(pin_sets), n_requests)``."""
    n_sets = len(pin_sets)
    if n_sets > 64:
        raise ValueError(f"{n_sets} pin sets in one pass: at most 64")
    sets = [np.unique(np.asarray(s, np.int64)) for s in pin_sets]
    ids = np.unique(np.concatenate([np.zeros(0, np.int64), *sets]))
    bits = np.zeros(len(ids), np.uint64)
    for v, s in enumerate(sets):
        bits[np.searchsorted(ids, s)] |= np.uint64(1 << v)
    # The latest virtual log position of each block: 0 never touched; a block pinned in some
    # variant keeps it negated (-1 never touched), so the one read a lookup makes says both.
    latest = np.zeros(n_unique, np.int32)
    latest[ids] = -1
    n = offsets.size - 1
    longest = int(np.diff(offsets).max()) if n else 0
    held = min(capacity, n_unique) + len(ids)  # every variant's cached blocks, at the most
    ring = 1  # room for 4x what can be live, or for every touch, whichever is less
    while ring < min(4 * (held + longest), blocks.size + longest + 1):
        ring *= 2
    return _loop(
        offsets,
        blocks,
        capacity,
        ids.astype(np.int32),
        bits,
        latest,
        np.empty(ring, np.int32),
        np.empty(held + longest, np.int32),
        np.zeros((n, n_sets), np.int32),
    ).T


@numba.njit(cache=True, nogil=True)
def _loop(offsets, blocks, capacity, ids, bits, latest, log, scratch, hits):  # type: ignore[no-untyped-def]
    # ``log[pos]``: the block touched at ``pos`` (b >= 0), or ``-2 - i`` for ``ids[i]``, a block
    # pinned in some variant, or STALE once that block was touched again later. So a walk reads
    # the ring alone, and only the rare pinned entries ask which variants pin them.
    n, n_sets = hits.shape
    mask = log.size - 1
    ring = log.size
    # Virtual positions start at 2, so that a negated position never reads as -1.
    heads = np.full(n_sets, 2, np.int64)
    sizes = np.zeros(n_sets, np.int64)
    run_end = np.empty(n_sets, np.int64)
    moved = np.empty(n_sets, np.int64)
    tail = 2
    low, high = 2, 2  # the smallest and the largest head
    one = np.uint64(1)
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        if tail - low + (end - start) > ring:  # compact: live entries, in order, to the end
            order = np.argsort(heads)
            j = 0
            live = 0
            for pos in range(low, tail):
                while j < n_sets and heads[order[j]] == pos:
                    moved[order[j]] = tail + live  # the live entries before it stay before it
                    j += 1
                if log[pos & mask] != STALE:
                    scratch[live] = log[pos & mask]
                    live += 1
            while j < n_sets:
                moved[order[j]] = tail + live
                j += 1
            for i in range(live):
                e = scratch[i]
                at = tail + i
                log[at & mask] = e
                if e >= 0:
                    latest[e] = at
                else:
                    latest[ids[-2 - e]] = -at
            heads[:] = moved
            tail += live
            low, high = heads.min(), heads.max()
        top = tail + (end - start) - 1
        run_end[:] = NONE
        open_runs = n_sets
        missed_all = 0
        for p in range(start, end):
            b = blocks[p]
            old = latest[b]
            pin = np.searchsorted(ids, b) if old < 0 else -1
            if old >= high:
                pass  # pinned nowhere, cached in every variant
            elif 0 <= old < low:  # pinned nowhere, cached in none
                missed_all += 1
                if open_runs:
                    for v in range(n_sets):
                        if run_end[v] == NONE:
                            run_end[v] = p - start
                    open_runs = 0
            else:  # near the eviction edge, or pinned somewhere: variant by variant
                pins = bits[pin] if pin >= 0 else np.uint64(0)
                for v in range(n_sets):
                    pinned = (pins >> np.uint64(v)) & one
                    if not (old != -1 if pinned else abs(old) >= heads[v]):
                        sizes[v] += 1
                        if run_end[v] == NONE:
                            run_end[v] = p - start
                            open_runs -= 1
            at = abs(old)  # 0 or 1: never touched, below every head
            slot = top - (p - start)
            if at >= slot:  # a block repeated in the request keeps its shallowest (latest) slot
                log[slot & mask] = STALE
                continue
            if at >= low:
                log[at & mask] = STALE
            if pin >= 0:
                log[slot & mask] = -2 - pin
                latest[b] = -slot
            else:
                log[slot & mask] = b
                latest[b] = slot
        tail += end - start
        for v in range(n_sets):
            hits[r, v] = end - start if run_end[v] == NONE else run_end[v]
            size = sizes[v] + missed_all
            head = heads[v]
            bit = one << np.uint64(v)
            while size > capacity:  # live entries count, those of blocks pinned here not
                e = log[head & mask]
                if e >= 0 or (e != STALE and bits[-2 - e] & bit == 0):
                    size -= 1
                head += 1
            heads[v] = head
            sizes[v] = size
        low, high = heads.min(), heads.max()
    return hits

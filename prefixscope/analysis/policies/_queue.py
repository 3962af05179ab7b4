"""``fifo``'s whole-trace fast path: its one queue as a ring of block ids, beside a byte per
block (cached or not) and, when asked, the tenant that inserted it.

FIFO never moves a cached block: blocks enter at the tail, in the order the row operations
insert them (a request's new blocks deepest first), and leave only from the head. So the queue
is a ring, written and read in order, and a block's state is one byte where its row
(``fifo.py``) is sixteen (with its owner, two, or five past 128 tenants: ``rows.owners``). On
the generated week (250 M lookups, 158 M distinct blocks) a replay took 2.6-3.0 s against the
rows' 9.8-11.5 s; on the ×20 trace the 8 replays of ``benchmarks/policy_speed.py`` take 0.13 s
(docs/simulation.md, "Speed"; benchmarks/RESULTS.md, "Stop 68"). ``tests/test_policies.py``
holds it to the row operations' loop (``_row_loops.cycle``), the policy's definition in the
fleet and the docs.

Invariant: ``size`` blocks are cached, exactly those between ``head`` and ``tail``; at most a
capacity and one request's blocks, which the ring holds.
"""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.policies._lists import NONE, _lookup


@numba.njit(cache=True, nogil=True)
def fifo(offsets, blocks, tenants, n_unique, capacity, track, owner, hits, cross):  # type: ignore[no-untyped-def]
    """Every request's leading run of cached blocks into ``hits``, and, when ``track``,
    whether each hit lookup found a block another tenant inserted into ``cross`` (``owner``:
    per block, the tenant that inserted it, ``rows.owners``); returns the first request after
    which the cache held its capacity (``NONE``: never)."""
    n = offsets.size - 1
    longest = 0
    for r in range(n):
        longest = max(longest, offsets[r + 1] - offsets[r])
    room = min(capacity, n_unique) + longest + 1
    ring = np.empty(room, np.int32)
    cached = np.zeros(n_unique, np.bool_)
    head = tail = size = 0
    filled_at = NONE
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        tenant = tenants[r]
        hits[r] = _lookup(blocks, start, end, cached, owner, tenant, cross, track)
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            if not cached[b]:
                cached[b] = True
                if track:
                    owner[b] = tenant
                ring[tail] = b
                tail = tail + 1 if tail + 1 < room else 0
                size += 1
        while size > capacity:
            cached[ring[head]] = False
            head = head + 1 if head + 1 < room else 0
            size -= 1
        if filled_at == NONE and size >= capacity:
            filled_at = r
    return filled_at

"""``fifo``: evict the block inserted earliest; a hit does not refresh it, so a parent can leave
before its child (the leading-run rule then decides what counts). A request's new blocks are
inserted deepest first, so among them the deepest leaves first.

A row policy (``rows.py``): one row per block, [next, prev, cached, owner], on one list in
insertion order, its sentinel the one row after the blocks'. In a fleet, ``fifo`` stays on the
loop's own list (``fleet/caches.py``), which carries the DRAM tier and the store. A single
cache replays on a ring (``_queue.py``), its fast path, held to these operations' loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.policies import _queue
from prefixscope.analysis.policies.base import PolicyOptions
from prefixscope.analysis.policies.rows import (
    RowOps,
    RowPolicy,
    cached,
    node_push_back,
    node_unlink,
    operation,
    outcome_arrays,
    owner,
    owners,
)
from prefixscope.analysis.trace.csr import Trace


@operation
def touch(node, order, parent, base, sen, ob, top, b, tenant):  # type: ignore[no-untyped-def]
    """A new block goes to the list's tail; a hit changes nothing."""
    v = base + b
    if node[v, 2] > 0:
        return 0
    node_push_back(node, sen, v)
    node[v, 2] = 1
    node[v, 3] = tenant
    return 1


@operation
def evict(node, order, parent, base, sen, ob, top, capacity):  # type: ignore[no-untyped-def]
    """The list's head, inserted earliest. Always a victim: the cache holds a block."""
    v = node[sen, 0]
    node_unlink(node, v)
    node[v, 2] = 0
    return v - base


@dataclass(frozen=True)
class FIFO(RowPolicy):
    name: str = "fifo"
    label: str = "FIFO"
    refreshes = False
    ops = RowOps(touch, evict, cached, owner)

    def shape(self, trace: Trace) -> tuple[int, int]:
        return 1, 1  # one sentinel, the list; no order

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        """The ring (``_queue.py``)."""
        track, hits, cross = outcome_arrays(trace, options)
        filled_at = _queue.fifo(
            trace.offsets, trace.blocks, trace.tenant_codes, trace.n_unique, capacity, track,
            owners(trace, track), hits, cross,
        )  # fmt: skip
        return hits, cross, filled_at

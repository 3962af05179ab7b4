"""The recency policies:

- ``lru``: evict the least recently used block; among blocks last used by the same request,
  the deepest first. Every request touches its whole chain, so a parent is used at least as
  recently as its child and on a tie the child goes first: the cache stays prefix-closed.
  A row policy (``rows.py``), defined by its operations below, ``fifo``'s list with a hit
  moved to the tail; a single cache replays on a touch log (``_kernels.lru_plain``), its fast
  path, held to these operations' loop, and a fleet keeps it on the loop's own list
  (``fleet/caches.py``), held to them too.
- ``ttl``: before each request, drop every block idle longer than ``--ttl`` seconds (strictly);
  when full, LRU (``_kernels.lru``, a linked list, which alone knows idle times).
- ``pinned``: LRU, except that pinned blocks (the blocks of ``--pin``/``--pin-top`` prefixes)
  never leave once cached; they count against the capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies.base import BoundedPolicy, PolicyOptions
from prefixscope.analysis.policies.fifo import evict
from prefixscope.analysis.policies.rows import (
    RowOps,
    RowPolicy,
    cached,
    node_push_back,
    node_unlink,
    operation,
    owner,
    owners,
)
from prefixscope.analysis.trace.csr import Trace


@operation
def touch(node, order, parent, base, sen, ob, top, b, tenant):  # type: ignore[no-untyped-def]
    """A block used goes to the list's tail, a new one inserted by ``tenant``; a hit keeps
    its owner. Eviction is ``fifo``'s: the list's head."""
    v = base + b
    if node[v, 2] > 0:
        node_unlink(node, v)
        node_push_back(node, sen, v)
        return 0
    node_push_back(node, sen, v)
    node[v, 2] = 1
    node[v, 3] = tenant
    return 1


def _kernel():  # type: ignore[no-untyped-def]
    # Imported on first use: numba takes a third of a second to load; only simulations need it.
    from prefixscope.analysis.policies import _kernels

    return _kernels


def _linked_lru(trace: Trace, capacity: int, ttl: float, pins: np.ndarray):  # type: ignore[no-untyped-def]
    """The linked-list LRU kernel, which alone knows idle times."""
    return _kernel().lru(
        trace.offsets,
        trace.blocks,
        trace.tenant_codes,
        trace.times,
        trace.n_unique,
        capacity,
        ttl,
        pins,
    )


def _plain_lru(trace: Trace, capacity: int, options: PolicyOptions, pins: np.ndarray | None = None):  # type: ignore[no-untyped-def]
    """The touch-log LRU kernel (the fast one): plain, or with pins; owners are tracked only
    when the trace has several tenants and the caller wants cross-tenant lookups."""
    _check_touch_log(trace)
    track = options.cross and len(trace.tenants) > 1
    return _kernel().lru_plain(
        trace.offsets,
        trace.blocks,
        trace.tenant_codes,
        trace.n_unique,
        capacity,
        track,
        owners(trace, track),
        pins,
    )


def _check_touch_log(trace: Trace) -> None:
    if trace.n_lookups >= 2**30:  # log positions are int32, compaction copies included
        raise ValueError("a trace of 2**30 block lookups or more: split it")


def _check_pins_fit(n_pinned: int, capacity: int) -> None:
    if n_pinned > capacity:
        raise ValueError(f"{n_pinned} pinned blocks do not fit in {capacity} blocks")


def _no_pins(trace: Trace) -> np.ndarray:
    return np.zeros(trace.n_unique, dtype=np.bool_)


@dataclass(frozen=True)
class LRU(RowPolicy):
    name: str = "lru"
    label: str = "LRU"
    ops = RowOps(touch, evict, cached, owner)

    def shape(self, trace: Trace) -> tuple[int, int]:
        return 1, 1  # one sentinel, the list; no order

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        """The touch log (``_kernels.lru_plain``)."""
        return _plain_lru(trace, capacity, options)


@dataclass(frozen=True)
class TTL(BoundedPolicy):
    name: str = "ttl"
    label: str = "TTL"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        if options.ttl_s is None or options.ttl_s < 0:
            raise ValueError("ttl needs --ttl SECONDS (>= 0)")
        return _linked_lru(trace, capacity, float(options.ttl_s), _no_pins(trace))


@dataclass(frozen=True)
class Pinned(BoundedPolicy):
    name: str = "pinned"
    label: str = "pinned-LRU"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        if options.pinned is None:
            raise ValueError("pinned needs --pin FILE or --pin-top K")
        pins = np.asarray(options.pinned, dtype=np.bool_)
        _check_pins_fit(int(pins.sum()), capacity)
        return _plain_lru(trace, capacity, options, pins)


def pinned_hit_blocks_many(
    trace: Trace, capacity: int, pin_sets: Sequence[np.ndarray]
) -> np.ndarray:
    """``Pinned().hit_blocks`` under each pin set (dense ids; the empty set gives ``lru``), in
    one pass over the trace instead of one replay per set: int32 ``(len(pin_sets),
    n_requests)``. The variants share the touch log and differ only in where each evicts
    (``_pin_sets``); ``tests/test_policies.py`` checks every row against its own replay."""
    if capacity < 1:
        raise ValueError(f"pinned needs a capacity of at least 1 block, got {capacity}")
    for ids in pin_sets:
        _check_pins_fit(len(np.unique(ids)), capacity)
    _check_touch_log(trace)
    run = _kernel().pinned_sets
    hits = [
        run(trace.offsets, trace.blocks, trace.n_unique, capacity, pin_sets[i : i + 64])
        for i in range(0, len(pin_sets), 64)
    ]
    return np.concatenate(hits) if hits else np.zeros((0, trace.n_requests), np.int32)

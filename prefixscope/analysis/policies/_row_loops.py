"""The loops over a row policy's operations (``rows.py``), written once for every policy:

- :func:`cycle`, the single cache's request cycle (docs/simulation.md), with the operations
  inlined;
- :func:`fleet_ops`, the same operations over one request, ``touch_request`` (the request's
  blocks, deepest first) and ``evict_to`` (victims while over the capacity), compiled as C
  functions that the fleet loop calls through a function value on each replica's rows
  (``fleet/_policy_cache.py``). numba types a C function by its signature alone, where it types
  a jitted function by its identity: so the fleet loop, compiled once, runs every row policy.
  A call per request, not per block: a call through a function value took about 20 ns a block
  on the x20 trace, 2.7 times the inlined cycle's time; per request, 1.3 times.

Both close over the policy's operations so that numba inlines them; numba caches no closure on
disk, so each process compiles them on first use: 0.9 s (lfu) and 2.3 s (s3fifo) for the
single cache's loop, 0.6 and 1.6 s for the fleet's, measured beside a test run.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numba
from numba.core.errors import NumbaExperimentalFeatureWarning

NONE = -1
# numba calls function values experimental and warns at each compile that takes one; the fleet
# tests check what they compute (tests/test_fleet.py, tests/test_policy_registry.py).
warnings.filterwarnings(
    "ignore", "First-class function type", category=NumbaExperimentalFeatureWarning
)

_I64 = numba.int64
_ROWS = numba.int32[:, ::1]
_IDS = numba.int32[::1]
#: ``touch_request(node, order, parent, base, sen, ob, top, blocks, start, end, tenant, out)``:
#: the count of blocks inserted, their ids in ``out``.
TOUCH_REQUEST = _I64(_ROWS, _ROWS, _IDS, _I64, _I64, _I64, _I64, _IDS, _I64, _I64, _I64, _IDS)
#: ``evict_to(node, order, parent, base, sen, ob, top, capacity, size, out)``: the count of
#: victims evicted until ``size`` less them is at most ``capacity``, their ids in ``out``.
EVICT_TO = _I64(_ROWS, _ROWS, _IDS, _I64, _I64, _I64, _I64, _I64, _I64, _IDS)

_LOCK = threading.Lock()
_CYCLES: dict[Any, Any] = {}
_FLEET_OPS: dict[Any, tuple[Any, Any]] = {}


def _once(table: dict[Any, Any], key: Any, make: Any) -> Any:
    """``make(key)``, compiled once a process: the lock keeps two threads (a Dask worker's)
    from compiling it twice."""
    with _LOCK:
        if key not in table:
            table[key] = make(key)
        return table[key]


def cycle(ops):  # type: ignore[no-untyped-def]
    """The single cache's loop over ``ops`` (``rows.RowOps``), compiled once a process."""
    return _once(_CYCLES, ops, _compile_cycle)


def _compile_cycle(ops):  # type: ignore[no-untyped-def]
    touch, evict, cached, owner, always = ops

    # Compiled without reference counting: the operations are inlined with their arrays, and
    # counting those on each call cost the loop 20-40% (measured on the x20 trace).
    @numba.njit(nogil=True, _nrt=False)
    def loop(offsets, blocks, tenants, parent, n_unique, capacity, track, node, order, hits, cross):  # type: ignore[no-untyped-def]
        n = offsets.size - 1
        top = order.shape[0] - 1
        size = 0
        filled_at = NONE
        for r in range(n):
            start, end = offsets[r], offsets[r + 1]
            tenant = tenants[r]
            k = 0
            while start + k < end and cached(node, blocks[start + k]):
                if track:
                    cross[start + k] = owner(node, blocks[start + k]) != tenant
                k += 1
            hits[r] = k
            for p in range(end - 1, start - 1, -1):
                size += touch(node, order, parent, 0, n_unique, 0, top, blocks[p], tenant)
            while size > capacity:
                if always:  # a constant here: numba keeps one branch
                    evict(node, order, parent, 0, n_unique, 0, top, capacity)
                    size -= 1
                elif evict(node, order, parent, 0, n_unique, 0, top, capacity) != NONE:
                    size -= 1
            if filled_at == NONE and size >= capacity:
                filled_at = r
        return filled_at

    return loop


def fleet_ops(ops):  # type: ignore[no-untyped-def]
    """``touch_request`` and ``evict_to`` over ``ops``, compiled once a process."""
    return _once(_FLEET_OPS, ops, _compile_fleet_ops)


def _compile_fleet_ops(ops):  # type: ignore[no-untyped-def]
    touch, evict, always = ops.touch, ops.evict, ops.always

    def touch_request(node, order, parent, base, sen, ob, top, blocks, start, end, tenant, out):  # type: ignore[no-untyped-def]
        n = 0
        for p in range(end - 1, start - 1, -1):
            b = blocks[p]
            if touch(node, order, parent, base, sen, ob, top, b, tenant):
                out[n] = b
                n += 1
        return n

    def evict_to(node, order, parent, base, sen, ob, top, capacity, size, out):  # type: ignore[no-untyped-def]
        n = 0
        while size - n > capacity:
            v = evict(node, order, parent, base, sen, ob, top, capacity)
            if always or v != NONE:  # else the round only moved blocks: ask again
                out[n] = v
                n += 1
        return n

    return (
        numba.cfunc(TOUCH_REQUEST, nopython=True)(touch_request),
        numba.cfunc(EVICT_TO, nopython=True)(evict_to),
    )


def _no_touch(node, order, parent, base, sen, ob, top, blocks, start, end, tenant, out):  # type: ignore[no-untyped-def]
    return 0


def _no_evict(node, order, parent, base, sen, ob, top, capacity, size, out):  # type: ignore[no-untyped-def]
    return 0


def no_ops():  # type: ignore[no-untyped-def]
    """The function values of a fleet whose caches are lists: never called, typed as a row
    policy's (compiled on first use, then loaded from numba's cache)."""
    return _once(_FLEET_OPS, None, lambda _: (
        numba.cfunc(TOUCH_REQUEST, nopython=True, cache=True)(_no_touch),
        numba.cfunc(EVICT_TO, nopython=True, cache=True)(_no_evict),
    ))  # fmt: skip

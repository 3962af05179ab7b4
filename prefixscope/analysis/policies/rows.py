"""Policies kept in rows, and the request cycle they share, written once.

A row policy keeps each cache's state in int32 rows: ``node``, one row per block then the
policy's sentinel rows, and ``order``, rows of its own (LFU's order of buckets; one unused row
where a policy has none). It provides four compiled operations on one cache's rows, with the
same arguments for every policy:

- ``touch(node, order, parent, base, sen, ob, top, b, tenant)``: block ``b`` used; 1 when it
  was inserted, else 0;
- ``evict(node, order, parent, base, sen, ob, top, capacity)``: one eviction round; the victim
  (its block id) or ``NONE`` when the round only moved blocks (the caller asks again);
- ``cached(node, v)`` and ``owner(node, v)``: whether row ``v`` is a cached block, and the
  tenant that inserted it.

Block ``b`` is at row ``base + b``, the policy's sentinels from ``sen = base + n_unique``, its
``order`` rows from ``ob`` and the last of them at ``top``. One cache has ``base = ob = 0``;
the fleet gives each replica its own rows (``fleet/_policy_cache.py``), so a replica runs the
same operations ``simulate`` runs, and one replica equals ``simulate`` by construction.

Adding a policy is one module (a :class:`RowPolicy` with its rows and operations) and one
registry line (``policies.POLICIES``): ``simulate``, ``curve``, ``fleet`` and ``plan`` take it
from there (docs/simulation.md, "Adding a policy", works one through).
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numba
import numpy as np
from numba.core.errors import NumbaExperimentalFeatureWarning

from prefixscope.analysis.policies.base import BoundedPolicy, PolicyOptions
from prefixscope.analysis.trace.csr import Trace

NONE = -1
# numba calls function values experimental and warns at each compile that takes one; the fleet
# loop's tests check what they compute.
warnings.filterwarnings(
    "ignore", "First-class function type", category=NumbaExperimentalFeatureWarning
)
#: The decorator of an operation: inlined where a loop calls it, so the single cache's loop
#: runs as fast as one written for the policy (measured on the x20 trace).
operation = numba.njit(inline="always")

_I64 = numba.int64
_ROWS = numba.int32[:, ::1]
#: The operations' signatures, as the fleet loop calls them through a function value.
TOUCH = _I64(_ROWS, _ROWS, numba.int32[::1], _I64, _I64, _I64, _I64, _I64, _I64)
EVICT = _I64(_ROWS, _ROWS, numba.int32[::1], _I64, _I64, _I64, _I64, _I64)


class RowOps(NamedTuple):
    """A policy's four operations (module docstring), compiled to be inlined."""

    touch: Any
    evict: Any
    cached: Any
    owner: Any


@dataclass(frozen=True)
class RowPolicy(BoundedPolicy):
    """A bounded policy kept in rows. A subclass sets ``name``, ``needs_parent`` (its
    operations read each block's parent) and ``ops``, and says how many rows it keeps."""

    name: str = ""
    needs_parent: ClassVar[bool] = False
    ops: ClassVar[RowOps]

    def shape(self, trace: Trace) -> tuple[int, int]:
        """Per cache: the sentinel rows after the blocks' in ``node``, and the rows of
        ``order`` (at least 1; its last is ``top``)."""
        raise NotImplementedError

    def empty(self, trace: Trace, caches: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """``caches`` empty caches' rows, one after another: every sentinel links to itself
        and every other field is 0 (an operation's fresh state); so does each ``order`` row."""
        extra, span = self.shape(trace)
        rows = trace.n_unique + extra
        node = np.zeros((caches * rows, 4), np.int32)
        first = np.arange(caches, dtype=np.int32) * rows + trace.n_unique
        sentinels = (first[:, None] + np.arange(rows - trace.n_unique, dtype=np.int32)).ravel()
        node[sentinels, 0] = sentinels
        node[sentinels, 1] = sentinels
        order = np.zeros((caches * span, 2), np.int32)
        order[:] = np.arange(caches * span, dtype=np.int32)[:, None]
        return node, order

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        node, order = self.empty(trace)
        parent = trace.parent if self.needs_parent else np.zeros(1, np.int32)
        track = len(trace.tenants) > 1
        hits = np.zeros(trace.n_requests, np.int32)
        cross = np.zeros(trace.blocks.size if track else 0, np.bool_)
        filled_at = cycle(self.ops)(
            trace.offsets, trace.blocks, trace.tenant_codes, parent, trace.n_unique,
            capacity, track, node, order, hits, cross,
        )  # fmt: skip
        return hits, cross, filled_at

    def fleet_ops(self) -> tuple[Any, Any]:
        """``touch`` and ``evict`` compiled for the fleet loop's function values."""
        return fleet_ops(self.ops)


_LOCK = threading.Lock()
_CYCLES: dict[RowOps, Any] = {}
_FLEET_OPS: dict[RowOps, tuple[Any, Any]] = {}


def cycle(ops: RowOps):  # type: ignore[no-untyped-def]
    """The single cache's request cycle (docs/simulation.md) over ``ops``, compiled once per
    process and policy. It closes over the operations so that numba inlines them, which a
    function passed as an argument is not (measured 1.3x slower); numba does not cache a
    closure on disk, so each process compiles it on first use (about 0.8 s)."""
    with _LOCK:
        if ops not in _CYCLES:
            _CYCLES[ops] = _compile_cycle(ops)
        return _CYCLES[ops]


def _compile_cycle(ops: RowOps):  # type: ignore[no-untyped-def]
    touch, evict, cached, owner = ops

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
                if evict(node, order, parent, 0, n_unique, 0, top, capacity) != NONE:
                    size -= 1
            if filled_at == NONE and size >= capacity:
                filled_at = r
        return filled_at

    return loop


def fleet_ops(ops: RowOps) -> tuple[Any, Any]:
    """``touch`` and ``evict`` compiled to their signatures (:data:`TOUCH`, :data:`EVICT`) as C
    functions, which numba types by their signature alone (a jitted function is typed by its
    identity, and each policy would compile the whole fleet loop again): so the loop, compiled
    once, calls any policy's through a function value."""
    with _LOCK:
        if ops not in _FLEET_OPS:
            _FLEET_OPS[ops] = (
                numba.cfunc(TOUCH, nopython=True, cache=True)(ops.touch.py_func),
                numba.cfunc(EVICT, nopython=True, cache=True)(ops.evict.py_func),
            )
        return _FLEET_OPS[ops]


def _untouched(node, order, parent, base, sen, ob, top, b, tenant):  # type: ignore[no-untyped-def]
    return 0


def _unevicted(node, order, parent, base, sen, ob, top, capacity):  # type: ignore[no-untyped-def]
    return NONE


#: The function values of a fleet whose caches are lists: never called, typed as the rest.
NO_OPS = RowOps(operation(_untouched), operation(_unevicted), None, None)


# --- rows linked as lists: [next, prev, ...], a sentinel row linking to itself when empty ---


@numba.njit(inline="always")
def node_unlink(node, b):  # type: ignore[no-untyped-def]
    node[node[b, 1], 0] = node[b, 0]
    node[node[b, 0], 1] = node[b, 1]


@numba.njit(inline="always")
def node_push_back(node, s, b):  # type: ignore[no-untyped-def]
    last = node[s, 1]
    node[last, 0] = b
    node[b, 1] = last
    node[b, 0] = s
    node[s, 1] = b


@numba.njit(inline="always")
def node_insert_after(node, f, g):  # type: ignore[no-untyped-def]
    nxt = node[f, 0]
    node[g, 0] = nxt
    node[g, 1] = f
    node[nxt, 1] = g
    node[f, 0] = g

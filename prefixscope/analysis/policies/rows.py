"""Policies kept in rows: what a row policy gives, and the lists its rows are made of. The
request cycle over its operations is written once for every row policy, in ``_row_loops.py``.

A row policy keeps each cache's state in int32 rows: ``node``, one row per block then the
policy's sentinel rows, and ``order``, rows of its own (LFU's order of buckets; one unused row
where a policy has none). It provides four compiled operations on one cache's rows, with the
same arguments for every policy:

- ``touch(node, order, parent, base, sen, ob, top, b, tenant)``: block ``b`` used; 1 when it
  was inserted, else 0;
- ``evict(node, order, parent, base, sen, ob, top, capacity)``: one eviction round; the victim
  (its block id) or, for a policy whose ``RowOps.always`` is False, ``NONE`` when the round
  only moved blocks (the caller asks again);
- ``cached(node, v)`` and ``owner(node, v)``: whether row ``v`` is a cached block, and the
  tenant that inserted it.

Block ``b`` is at row ``base + b``, the policy's sentinels from ``sen = base + n_unique``, its
``order`` rows from ``ob`` and the last of them at ``top``. One cache has ``base = ob = 0``;
the fleet gives each replica its own rows (``fleet/_policy_cache.py``) and calls the same
operations over each request, so one replica equals ``simulate`` by construction.

Adding a policy is one module (a :class:`RowPolicy` with its rows and operations) and one
registry line (``policies.POLICIES``): ``simulate``, ``curve``, ``fleet`` and ``plan`` take it
from there (docs/simulation.md, "Adding a policy", works one through).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numba
import numpy as np

from prefixscope.analysis.policies._row_loops import NONE, cycle, fleet_ops
from prefixscope.analysis.policies.base import BoundedPolicy, PolicyOptions
from prefixscope.analysis.trace.csr import Trace

__all__ = ["NONE", "RowOps", "RowPolicy", "operation"]

#: The decorator of an operation: inlined where a loop calls it, so the single cache's loop
#: runs as fast as one written for the policy (measured on the x20 trace).
operation = numba.njit(inline="always")


class RowOps(NamedTuple):
    """A policy's four operations (module docstring), compiled to be inlined; ``always``:
    every eviction round gives a victim (``evict`` never returns ``NONE``), so the single
    cache's loop counts the victims without reading them, which lets the processor run the
    next round's reads ahead (LFU: 3-4% of its replay, on the x20 trace)."""

    touch: Any
    evict: Any
    cached: Any
    owner: Any
    always: bool = True


@dataclass(frozen=True)
class RowPolicy(BoundedPolicy):
    """A bounded policy kept in rows. A subclass sets ``name``, ``label`` (how the plan's
    words name it), ``needs_parent`` (its operations read each block's parent) and ``ops``, and
    says how many rows it keeps."""

    name: str = ""
    needs_parent: ClassVar[bool] = False
    #: Whether a hit refreshes a block's place (``fifo``: no). In a fleet the store, a list
    #: beside the replicas' caches, refreshes what it serves only under a policy that does.
    refreshes: ClassVar[bool] = True
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
        track, hits, cross = outcome_arrays(trace, options)
        filled_at = cycle(self.ops)(
            trace.offsets, trace.blocks, trace.tenant_codes, parent, trace.n_unique,
            capacity, track, node, order, hits, cross,
        )  # fmt: skip
        return hits, cross, filled_at

    def fleet_ops(self) -> tuple[Any, Any]:
        """The operations over a request, compiled for the fleet loop (``_row_loops``)."""
        return fleet_ops(self.ops)


def outcome_arrays(trace: Trace, options: PolicyOptions) -> tuple[bool, np.ndarray, np.ndarray]:
    """A replay's outcome, to fill: whether it keeps owners (only when the caller asks which
    lookups crossed tenants, and there are several), its hits per request, and its
    cross-tenant flag per lookup (empty when it keeps no owners)."""
    track = options.cross and len(trace.tenants) > 1
    hits = np.zeros(trace.n_requests, np.int32)
    cross = np.zeros(trace.blocks.size if track else 0, np.bool_)
    return track, hits, cross


def owners(trace: Trace, track: bool) -> np.ndarray:
    """Per distinct block, the tenant that cached it (one entry when ``track`` is off), in the
    narrowest of int8 and int32 that holds every tenant code: a byte a block where a log has at
    most 128 tenants, where int32 held four. A replay of the generated week (158 M distinct
    blocks, 50 tenants) so holds 0.16 GB of owners, not 0.63 GB."""
    small = len(trace.tenants) <= 2**7
    return np.zeros(trace.n_unique if track else 1, np.int8 if small else np.int32)


# --- the usual row, [next, prev, state, owner] with state 0 when not cached: its ``cached`` and
# ``owner`` (``fifo``, ``lfu``, the docs' clock) ---------------------------------------------


@operation
def cached(node, v):  # type: ignore[no-untyped-def]
    return node[v, 2] > 0


@operation
def owner(node, v):  # type: ignore[no-untyped-def]
    return node[v, 3]


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

"""The policies a fleet's caches run under the ``ideal`` engine, and how: kept by the loop per
replica (``lru``, ``fifo`` and ``ttl`` on a linked list, ``_cache.py``, and ``pinned`` with a
``--pin`` file on ``lru``'s; every other row policy of the registry, ``lfu`` and ``s3fifo``
today, on its own rows by its own operations, ``_policy_cache.py``) under any router,
replayed per replica under a fixed routing (``replayed.py``: ``pinned --pin-top``, whose pins
are each replica's own stream's), or refused with the reason; and which run over tiers.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np

from prefixscope.analysis.fleet import _records
from prefixscope.analysis.fleet.replayed import REPLAYED_POLICIES, Pins
from prefixscope.analysis.policies import row_policies
from prefixscope.analysis.policies.rows import RowPolicy
from prefixscope.analysis.trace.csr import Trace


class LoopPolicy(NamedTuple):
    """How the loop keeps a policy: its code (``_records.LIST``, ``ROWS`` or ``PINNED``); on a
    list, whether a hit refreshes a block; in rows, the policy."""

    code: int
    recency: bool = True
    rows: RowPolicy | None = None


#: The ideal engine's policies the loop keeps on its lists.
LIST_POLICIES = {
    "lru": LoopPolicy(_records.LIST),
    "fifo": LoopPolicy(_records.LIST, recency=False),
    "ttl": LoopPolicy(_records.LIST),
    "pinned": LoopPolicy(_records.PINNED),  # with --pin FILE; --pin-top is replayed
}


def loop_policies() -> dict[str, LoopPolicy]:
    """The policies the loop keeps per replica: its lists' (``fifo`` among them, a row policy
    in ``simulate`` kept on the list here, which carries the DRAM tier and the store), and
    every other row policy the registry holds when asked (a policy added to ``POLICIES`` runs
    in a fleet with no line here)."""
    rows = {n: LoopPolicy(_records.ROWS, recency=p.refreshes, rows=p)
            for n, p in row_policies().items() if n not in LIST_POLICIES}  # fmt: skip
    return {**LIST_POLICIES, **rows}


def fleet_policies() -> tuple[str, ...]:
    """Every policy a fleet runs: the loop's, and those replayed per replica (``replayed.py``)."""
    return tuple(dict.fromkeys((*loop_policies(), *REPLAYED_POLICIES)))


#: The registry's other policies, and why a fleet does not run them.
REFUSED_POLICIES = {"ceiling": "it is unbounded; a replica's cache has a capacity"}


def replayed(policy: str, pins: Pins) -> bool:
    """Whether each replica replays its routed stream by the policy's own kernel: a
    :data:`REPLAYED_POLICIES` one, but ``pinned`` from a file, which the loop keeps."""
    return policy in REPLAYED_POLICIES and not (policy == "pinned" and pins.file is not None)


def kept(policy: str, pins: Pins) -> LoopPolicy:
    """How the loop keeps ``policy``: a replayed one keeps nothing, as a list does."""
    if replayed(policy, pins):
        return LoopPolicy(_records.LIST)
    return loop_policies()[policy]


def check_policy(policy: str, pins: Pins, router: str, fixed: bool) -> None:
    """Whether a fleet runs ``policy`` behind ``router``; ``fixed``: its routing is fixed (a
    fixed router, or one replica)."""
    runs = fleet_policies()
    if policy not in runs:
        why = REFUSED_POLICIES.get(policy)
        raise ValueError(
            f"a fleet's caches run {', '.join(runs)}; got {policy!r}" + (f" ({why})" if why else "")
        )
    if replayed(policy, pins) and not fixed:
        alone = " --pin-top" if policy == "pinned" else ""
        pinned = ", or pin a --pin file's prefixes on every replica" if alone else ""
        raise ValueError(
            f"{policy}{alone} replays each replica's own requests, which a stateful router "
            f"({router}) decides as it goes: run it under round-robin, random or "
            f"session routing, or on one replica{pinned}"
        )


def tiered_policies() -> tuple[str, ...]:
    """The policies that run over tiers: ``lru`` and ``fifo`` on the loop's lists, and every
    row policy the loop keeps in rows (``_policy_cache.py``). ``ttl`` and ``pinned`` do not
    (where a dropped or a pinned block goes in a lower tier is not modelled), nor a policy
    replayed per replica (``replayed.py``)."""
    rows = (n for n, p in loop_policies().items() if p.code == _records.ROWS)
    return ("lru", "fifo", *rows)


def check_tiered_policy(policy: str, tiered: bool, caching: bool = True) -> None:
    """Tiers run under :func:`tiered_policies` only (``fleet`` and its stage check alike), and
    with prefix caching on: they hold cached blocks."""
    if tiered and not caching:
        raise ValueError("a DRAM tier or a store holds cached blocks: none with caching off")
    runs = tiered_policies()
    if tiered and policy not in runs:
        why = "where its victims would go in a DRAM tier or the store is not modelled"
        raise ValueError(f"{policy} runs on HBM alone: {why} (tiers run under {', '.join(runs)})")


def policy_rows(
    trace: Trace, loop: LoopPolicy, n_rep: int, longest: int
) -> _records.PolicyRows | None:
    """Each replica's empty rows of a row policy, its operations (``_policy_cache.py``) and
    room for the ids they return, ``longest`` (blocks of the longest request) + 1; None on a
    list."""
    if loop.rows is None:
        return None
    node, order = loop.rows.empty(trace, n_rep)
    out = np.zeros(longest + 1, np.int32)
    return _records.PolicyRows(node, order, *loop.rows.fleet_ops(), out)


#: Pin masks already matched, per trace object and pins: a grid of pinned fleets over one trace
#: (the fleet stage's, each worker's tasks) reads the file and matches it once, not per fleet.
#: The loop only reads a mask; a trace dropped drops its masks.
_MASKS: weakref.WeakKeyDictionary[Trace, dict[Pins, np.ndarray]] = weakref.WeakKeyDictionary()


def pinned_blocks(trace: Trace, pins: Pins, capacity: int) -> np.ndarray:
    """The ``--pin`` file's blocks the trace looks up, which every replica pins; more than a
    replica's ``capacity`` is refused, as ``simulate`` refuses it."""
    known = _MASKS.setdefault(trace, {})
    if pins not in known:
        known[pins] = np.asarray(pins.masks()(trace), np.bool_)
    pinned = known[pins]
    n = int(pinned.sum())
    if n > capacity:
        raise ValueError(f"{n} pinned blocks do not fit in {capacity} blocks")
    return pinned

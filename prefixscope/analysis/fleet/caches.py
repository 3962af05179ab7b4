"""The policies a fleet's caches run under the ``ideal`` engine, and how: kept by the loop per
replica (``lru``, ``fifo`` and ``ttl`` on a linked list, ``_cache.py``; ``lfu`` and ``s3fifo`` on
their own rows, and ``pinned`` with a ``--pin`` file, ``_policy_cache.py``) under any router,
replayed per replica under a fixed routing (``replayed.py``: ``pinned --pin-top``, whose pins
are each replica's own stream's), or refused with the reason.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np

from prefixscope.analysis.fleet import _records
from prefixscope.analysis.fleet.replayed import REPLAYED_POLICIES, Pins
from prefixscope.analysis.policies._lists import lfu_buckets, lfu_rows
from prefixscope.analysis.policies._s3fifo import empty_rows
from prefixscope.analysis.trace.csr import Trace


class LoopPolicy(NamedTuple):
    """How the loop keeps a policy: its code (``_records.LIST`` .. ``S3FIFO``), and, on a
    list, whether a hit refreshes a block."""

    code: int
    recency: bool = True


#: The ideal engine's policies the loop keeps per replica.
LOOP_POLICIES = {
    "lru": LoopPolicy(_records.LIST),
    "fifo": LoopPolicy(_records.LIST, recency=False),
    "ttl": LoopPolicy(_records.LIST),
    "lfu": LoopPolicy(_records.LFU),
    "s3fifo": LoopPolicy(_records.S3FIFO),
    "pinned": LoopPolicy(_records.PINNED),  # with --pin FILE; --pin-top is replayed
}
#: Every policy a fleet runs: the loop's, and those replayed per replica (``replayed.py``).
FLEET_POLICIES = tuple(dict.fromkeys((*LOOP_POLICIES, *REPLAYED_POLICIES)))
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
    return LOOP_POLICIES[policy]


def check_policy(policy: str, pins: Pins, router: str, fixed: bool) -> None:
    """Whether a fleet runs ``policy`` behind ``router``; ``fixed``: its routing is fixed (a
    fixed router, or one replica)."""
    if policy not in FLEET_POLICIES:
        why = REFUSED_POLICIES.get(policy)
        raise ValueError(
            f"a fleet's caches run {', '.join(FLEET_POLICIES)}; got {policy!r}"
            + (f" ({why})" if why else "")
        )
    if replayed(policy, pins) and not fixed:
        alone = " --pin-top" if policy == "pinned" else ""
        pinned = ", or pin a --pin file's prefixes on every replica" if alone else ""
        raise ValueError(
            f"{policy}{alone} replays each replica's own requests, which a stateful router "
            f"({router}) decides as it goes: run it under round-robin, random or "
            f"session routing, or on one replica{pinned}"
        )


def check_tiered_policy(policy: str, tiered: bool, caching: bool = True) -> None:
    """Tiers run under lru and fifo only (``fleet`` and its stage check alike), and with prefix
    caching on: they hold cached blocks."""
    if tiered and not caching:
        raise ValueError("a DRAM tier or a store holds cached blocks: none with caching off")
    if tiered and policy not in ("lru", "fifo"):
        why = "where its victims would go in a DRAM tier or the store is not modelled"
        raise ValueError(f"{policy} runs on HBM alone: {why} (tiers run under lru and fifo)")


def policy_rows(trace: Trace, code: int, n_rep: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Each replica's empty lfu or s3fifo state (``_policy_cache.py``); None on a list."""
    if code == _records.LFU:
        return lfu_rows(trace.n_unique, lfu_buckets(trace.blocks), n_rep)
    if code == _records.S3FIFO:
        return empty_rows(trace.n_unique, n_rep), np.zeros((1, 2), np.int32)
    return None


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

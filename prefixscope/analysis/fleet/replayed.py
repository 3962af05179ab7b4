"""Policies a replica replays on its own request stream.

The loop keeps ``lru``, ``fifo``, ``ttl``, ``lfu``, ``s3fifo`` and ``pinned`` with a ``--pin``
file per replica itself (``_cache.py``, ``_policy_cache.py``; ``caches.py``). Every other bounded
policy of the registry (``belady``, ``pinned --pin-top``, ``session``, ``liveness``) runs in a
fleet whose routing is fixed: a fixed router
(``round-robin``, ``random``, ``session``), or one replica. There what reaches a replica
depends on no cache, so each replica's routed requests (``trace/isolation.subset``) are
replayed by the policy's own kernel, the code ``simulate`` runs, and the loop takes their
leading runs as its lookups' result (``_cache.given_hit``) and times the steps as for any
cache. One replica equals ``simulate`` by construction; Belady's future is each replica's own,
and ``--pin-top`` pins the most shared prefixes of each replica's own stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.structure import pins
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import subset

#: The registry's policies a fleet replays per replica (under a fixed routing).
REPLAYED_POLICIES = ("belady", "pinned", "session", "liveness")


@dataclass(frozen=True)
class Pins:
    """``pinned``'s prefixes: the ``top`` most shared of each replica's stream, or ``file``'s."""

    top: int | None = None
    file: str | None = None

    def check(self, policy: str, read: bool = False) -> None:
        """The flags together; ``read``: the pin file too (before any work)."""
        given = (self.top is not None) + (self.file is not None)
        if policy == "pinned" and given != 1:
            raise ValueError("pinned needs --pin FILE or --pin-top K (one of them)")
        if policy != "pinned" and given:
            raise ValueError(f"--pin and --pin-top apply to --policy pinned, not {policy}")
        if read and self.file is not None:
            pins.read_hashes(self.file)

    def label(self) -> str:
        return f"pinned top={self.top}" if self.top is not None else f"pinned file={self.file}"

    def masks(self) -> Callable[[Trace], np.ndarray]:
        """A replica's pin mask of its own trace; the file read once for all replicas."""
        if self.top is not None:
            top = self.top
            return lambda trace: pins.top_shared(trace, top)
        assert self.file is not None
        wanted = pins.read_hashes(self.file)
        return lambda trace: pins.from_hashes(trace, wanted)


def replayed_hits(
    trace: Trace, policy: str, capacity: int, routing: np.ndarray, n_rep: int, pinned: Pins
) -> tuple[np.ndarray, np.ndarray]:
    """Per request its leading run of cached blocks under ``policy`` on its replica
    (``routing``), and per replica the request after which its cache was full (-1: never)."""
    hits = np.zeros(trace.n_requests, np.int32)
    filled = np.full(n_rep, -1, np.int64)
    mask = pinned.masks() if policy == "pinned" else None
    for i in range(n_rep):
        routed = np.flatnonzero(routing == i)
        if not routed.size:
            continue
        mine = trace if routed.size == trace.n_requests else subset(trace, routed)
        options = PolicyOptions(pinned=None if mask is None else mask(mine), cross=False)
        out = POLICIES[policy].replay(mine, capacity, options)
        hits[routed] = out.hit_blocks
        filled[i] = routed[out.filled_at] if out.filled_at >= 0 else -1
    return hits, filled

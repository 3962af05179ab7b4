"""The interface every eviction policy implements, and what a replay returns."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class PolicyOptions:
    """Settings some policies read: ``ttl_s`` (ttl), ``pinned`` (a bool per dense id: pinned);
    ``cross``: whether the replay must say which lookups crossed tenants (``hit_blocks`` does
    not ask, and a policy may then leave ``Outcome.cross`` empty and skip owner tracking)."""

    ttl_s: float | None = None
    pinned: np.ndarray | None = None
    cross: bool = True


@dataclass(frozen=True)
class Outcome:
    """A replay: per request the leading run of cached blocks (``hit_blocks``, int32); per
    lookup whether it hit a block another tenant inserted (``cross``, bool; empty when the
    trace has one tenant); the first request after which the cache held its capacity
    (``filled_at``, -1: never)."""

    hit_blocks: np.ndarray
    cross: np.ndarray
    filled_at: int


class Policy(Protocol):
    """An eviction policy. ``bounded`` policies need ``capacity_blocks >= 1``; unbounded ones
    take ``None``. Every policy obeys the request cycle of docs/simulation.md."""

    name: str  # the registry's key, what commands and tables say
    label: str  # how the plan's words name it ("S3-FIFO")
    bounded: bool

    def replay(
        self, trace: Trace, capacity_blocks: int | None, options: PolicyOptions
    ) -> Outcome: ...

    def hit_blocks(
        self, trace: Trace, capacity_blocks: int | None, options: PolicyOptions | None = None
    ) -> np.ndarray: ...


class BoundedPolicy:
    """Shared checks and the ``hit_blocks`` shortcut of policies that need a capacity."""

    name: str
    label: str = ""  # a subclass sets it; "" names the policy by ``name``
    bounded: bool = True

    def hit_blocks(
        self, trace: Trace, capacity_blocks: int | None, options: PolicyOptions | None = None
    ) -> np.ndarray:
        no_cross = replace(options or PolicyOptions(), cross=False)
        return self.replay(trace, capacity_blocks, no_cross).hit_blocks

    def replay(self, trace: Trace, capacity_blocks: int | None, options: PolicyOptions) -> Outcome:
        if capacity_blocks is None or capacity_blocks < 1:
            raise ValueError(
                f"{self.name} needs a capacity of at least 1 block, got {capacity_blocks}"
            )
        hits, cross, filled_at = self._run(trace, int(capacity_blocks), options)
        return Outcome(hits, cross, int(filled_at))

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        raise NotImplementedError

"""The policy interface every eviction strategy implements."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from prefixscope.analysis.trace import Trace


class Policy(Protocol):
    """An eviction policy. ``hit_blocks`` replays the whole trace and returns, per request, the
    length of the leading run of its blocks that were cached when it arrived (int32).

    ``bounded`` policies need ``capacity_blocks >= 1``; unbounded ones take ``None``.
    """

    name: str
    bounded: bool

    def hit_blocks(self, trace: Trace, capacity_blocks: int | None) -> np.ndarray: ...

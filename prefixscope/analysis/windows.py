"""Measure windows: which requests a hit rate is measured over. The cache always replays the
whole trace; a window only chooses the requests that are counted."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prefixscope.analysis.trace import Trace


def _all(trace: Trace) -> np.ndarray:
    return np.ones(trace.n_requests, dtype=bool)


def _last_half(trace: Trace) -> np.ndarray:
    """Requests at positions ``n // 2 .. n-1`` of the replay order (the second half by position,
    the convention of the KVCache.AI simulator, so figures compare)."""
    mask = np.zeros(trace.n_requests, dtype=bool)
    mask[trace.n_requests // 2 :] = True
    return mask


WINDOWS: dict[str, Callable[[Trace], np.ndarray]] = {"all": _all, "last-half": _last_half}

"""Measure windows: which requests a hit rate is measured over. The cache always replays the
whole trace; a window only chooses the requests that are counted."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from prefixscope.analysis.trace.csr import Trace


def _all(trace: Trace) -> np.ndarray:
    return np.ones(trace.n_requests, dtype=bool)


def _last_half(trace: Trace) -> np.ndarray:
    """Requests at positions ``n // 2 .. n-1`` of the replay order (the second half by position,
    the convention of the KVCache.AI simulator, so figures compare)."""
    mask = np.zeros(trace.n_requests, dtype=bool)
    mask[trace.n_requests // 2 :] = True
    return mask


WINDOWS: dict[str, Callable[[Trace], np.ndarray]] = {"all": _all, "last-half": _last_half}

#: The window measured from the run's one shared warm-up end (``steady.py``; the latest
#: configuration's own end, ``simulation/grid.py``); it
#: depends on the outcome, so it is not a mask of the trace alone.
STEADY = "steady"
KNOWN = (*WINDOWS, STEADY)


def check_windows(windows: Sequence[str]) -> None:
    unknown = [w for w in windows if w not in KNOWN]
    if unknown:
        raise ValueError(f"unknown window {unknown[0]!r}; known: {', '.join(KNOWN)}")

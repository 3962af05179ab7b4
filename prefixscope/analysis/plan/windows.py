"""The SLO's windows: an operator holds a latency SLO over windows of time (an hour, say), so
the SLO search judges a fleet window by window, and the busiest window is the one that binds.

The trace is cut at multiples of ``window_s`` from its first arrival, on the logged clock (a
load scale replays each window faster; it is still the logged hour). A window with no request
sets no constraint and is left out. Each window is simulated on its own: its requests, after
``warmup_s`` of the traffic logged just before it (the warm-up, simulated but not measured), so
that its caches and queues start from the state the earlier traffic left them in rather than
cold. The first window has no earlier traffic and starts cold, as the whole trace does.

What a window's simulation holds grows with the window and the fleet, never with the trace: a
week is searched at the cost of its busiest hour, then checked an hour at a time.

``WHOLE`` (``--slo-window all``) makes the whole trace one window, without a warm-up: the
search of earlier versions, and the answer on a trace of one window either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.plan.slo import SECONDS
from prefixscope.analysis.trace.csr import Trace

#: The default window: an hour of logged traffic.
DEFAULT_WINDOW_S = 3600.0
#: ``--slo-window all``: the whole trace as one window.
WHOLE = math.inf
#: The shortest window taken, in seconds: a percentile over a minute of traffic or less is noise.
MIN_WINDOW_S = 60.0
#: The longest: a year.
MAX_WINDOW_S = 365 * 86_400.0


@dataclass(frozen=True)
class Window:
    """The ``index``-th window with requests: requests ``first .. end - 1`` (replay positions)
    arrive in ``[start_s, end_s)`` seconds after the trace's first arrival; ``warm`` is the
    first request of its warm-up (``first`` when it has none); ``tokens`` the input tokens
    arriving in it."""

    index: int
    start_s: float
    end_s: float
    first: int
    end: int
    warm: int
    tokens: int

    @property
    def requests(self) -> int:
        return self.end - self.first


def parse_window(text: str) -> float:
    """``--slo-window``: a duration (``3600``, ``3600s``, ``60m``, ``1h``) of at least
    :data:`MIN_WINDOW_S` seconds and at most a year, or ``all`` for the whole trace; ValueError
    in one line otherwise."""
    word = str(text).strip().lower()
    if word == "all":
        return WHOLE
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    scale = units.get(word[-1:], 1.0)
    digits = word[:-1] if word[-1:] in units else word
    seconds = float(digits) * scale if SECONDS.fullmatch(digits) else math.nan
    if not (math.isfinite(seconds) and MIN_WINDOW_S <= seconds <= MAX_WINDOW_S):
        raise ValueError(
            f"--slo-window takes a duration of {MIN_WINDOW_S:g} s to a year (3600, 60m, 1h) or "
            f"all, got {str(text)[:40]!r} — e.g. --slo-window 1h"
        )
    return seconds


def split(trace: Trace, window_s: float = DEFAULT_WINDOW_S) -> tuple[Window, ...]:
    """The trace's windows with requests in them, each warmed up by one window of the traffic
    before it (the module docstring)."""
    times, n = trace.times, trace.n_requests
    if n == 0:
        return ()
    tokens = np.concatenate(([0], np.cumsum(trace.input_tokens, dtype=np.int64)))
    if not math.isfinite(window_s) or float(times[-1]) < window_s:
        end_s = window_s if math.isfinite(window_s) else float(times[-1])
        return (Window(0, 0.0, end_s, 0, n, 0, int(tokens[n])),)
    count = int(times[-1] // window_s) + 1
    edges = np.arange(count + 1, dtype=np.float64) * window_s
    bounds = np.searchsorted(times, edges, side="left")
    warm = np.searchsorted(times, edges[:-1] - window_s, side="left")
    full = [k for k in range(count) if bounds[k + 1] > bounds[k]]
    return tuple(
        Window(i, float(edges[k]), float(edges[k + 1]), int(bounds[k]), int(bounds[k + 1]),
               int(warm[k]), int(tokens[bounds[k + 1]] - tokens[bounds[k]]))
        for i, k in enumerate(full)
    )  # fmt: skip


def busiest(windows: tuple[Window, ...]) -> Window:
    """The window with the most arriving input tokens (the earliest among equals)."""
    return max(windows, key=lambda w: (w.tokens, -w.index))

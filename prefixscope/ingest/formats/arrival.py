"""Where conversations start on one timeline (``ingest --arrival``).

A published agent trace times each request from the start of its own conversation, and says
nothing of when conversations began relative to each other. Placing them is a choice the run
records: ``uniform:WINDOW`` draws each start uniformly over the window, ``poisson:RATE`` starts
them as a Poisson process of RATE conversations a unit of time (the first at 0). The draw is
``numpy.random.default_rng(seed)``'s, made for the conversations in the order of their names
(``agent_inputs.py``), so one input, spec and seed always give the same timeline, whatever
order an archive holds its members in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

#: Seconds per unit of a window (``uniform:90m``) or a rate (``poisson:30/h``).
UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: The default placement: over an hour, as the bundled Kimi trace spans.
DEFAULT_ARRIVAL = "uniform:1h"
#: The longest window accepted: ten years (a longer one lands past any plausible date).
MAX_WINDOW_S = 10 * 365 * 86400.0
_NUMBER = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_UNIFORM = re.compile(rf"uniform:(?P<n>{_NUMBER})(?P<unit>s|min|m|h|d)?")
_POISSON = re.compile(rf"poisson:(?P<n>{_NUMBER})/(?P<unit>s|min|m|h|d)")


@dataclass(frozen=True)
class Arrival:
    """A placement: ``kind`` uniform (``value``: the window, seconds) or poisson (``value``:
    conversations a second)."""

    kind: str
    value: float
    seed: int = 0

    @classmethod
    def parse(cls, text: str, seed: int = 0, flag: str = "--arrival") -> Arrival:
        """``uniform:WINDOW`` (``3600``, ``90m``, ``1h``, ``2d``; seconds without a unit) or
        ``poisson:RATE`` (``0.5/s``, ``30/min``, ``120/h``); ValueError, in one line naming
        ``flag``, else."""
        word = text.strip()
        if len(word) > 60 or not 0 <= seed < 2**63:
            raise ValueError(_refusal(text, flag))
        if m := _UNIFORM.fullmatch(word):
            window = _finite(m["n"], text, flag) * UNITS[m["unit"] or "s"]
            if not 0 < window <= MAX_WINDOW_S:
                raise ValueError(
                    f"{flag} {text!r}: the window must be over 0 and at most 10 years"
                )
            return cls("uniform", window, seed)
        if m := _POISSON.fullmatch(word):
            rate = _finite(m["n"], text, flag) / UNITS[m["unit"]]
            if not rate > 0:
                raise ValueError(f"{flag} {text!r}: the rate must be over 0")
            return cls("poisson", rate, seed)
        raise ValueError(_refusal(text, flag))

    def starts(self, n: int) -> np.ndarray:
        """The start, in seconds after ``--start``, of each of ``n`` conversations taken in
        the order of their names."""
        rng = np.random.default_rng(self.seed)
        if self.kind == "uniform":
            return rng.uniform(0.0, self.value, n)
        gaps = rng.exponential(1.0 / self.value, n)
        return np.concatenate(([0.0], np.cumsum(gaps[1:]))) if n else gaps


def _finite(text: str, whole: str, flag: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(_refusal(whole, flag))
    return value


def _refusal(text: str, flag: str) -> str:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return (
        f"{flag} {shown!r} is not a placement: give uniform:WINDOW (uniform:1h) or "
        "poisson:RATE (poisson:30/h)"
    )

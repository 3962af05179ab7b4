"""A latency SLO, as ``--slo`` gives it (``ttft-p95=2,ttft-p99=5,tpot-p95=0.05``), and how a
fleet's outcome is measured against it.

Each target is a metric and a limit in seconds; a fleet meets the SLO when every metric is at
most its limit. The constraint that binds is the one with the least slack, slack being
``(limit − value) / limit``: the share of its limit left (negative: missed by that share).

Metrics, over every request of the trace (the window ``all``), on the scaled clock:

- ``ttft-pNN``: the NNth percentile of the time to first token (arrival to the end of the step
  that computed the prompt's last token);
- ``tpot-pNN``: the NNth percentile of the time per output token after the first,
  ``(done − first token) / (output tokens − 1)``, over requests of two output tokens or more.

Percentiles are numpy's linear interpolation (``np.percentile``), as ``fleet_hit_rates``'
``ttft_p95_s`` is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

#: The metrics an SLO may name, and the percentiles they may take.
METRICS = ("ttft", "tpot")
_TARGET = re.compile(r"(?P<metric>[a-z]+)-p(?P<pct>[0-9]+(?:\.[0-9]+)?)")
#: Seconds as a person types them: ASCII digits, a decimal point, an exponent; nothing else
#: float() would take (other scripts' digits, "1_0", "nan", "inf").
SECONDS = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
FORM = "give METRIC-pNN=SECONDS[,...], e.g. ttft-p95=2,tpot-p95=0.05"
#: The largest limit taken, in seconds: a day.
MAX_LIMIT_S = 86_400.0


@dataclass(frozen=True)
class Target:
    """One metric at one percentile, at most ``limit_s`` seconds."""

    metric: str  # ttft or tpot
    percentile: float  # in (0, 100)
    limit_s: float

    @property
    def name(self) -> str:
        """``ttft-p95``: as given, a whole percentile without its decimals."""
        pct = f"{self.percentile:g}"
        return f"{self.metric}-p{pct}"


@dataclass(frozen=True)
class Slo:
    """Every target a fleet must meet, in the order given."""

    targets: tuple[Target, ...]

    @property
    def text(self) -> str:
        """The SLO as ``--slo`` reads it back."""
        return ",".join(f"{t.name}={t.limit_s:g}" for t in self.targets)

    def slack(self, values: dict[str, float]) -> dict[str, float]:
        """Each target's slack, ``(limit − value) / limit``, from the measured ``values``."""
        return {t.name: (t.limit_s - values[t.name]) / t.limit_s for t in self.targets}

    def meets(self, values: dict[str, float]) -> bool:
        return all(values[t.name] <= t.limit_s for t in self.targets)

    def binding(self, values: dict[str, float]) -> str:
        """The target with the least slack (the first given, among equals)."""
        slack = self.slack(values)
        return min(slack, key=lambda name: slack[name])


def parse_slo(text: str) -> Slo:
    """``METRIC-pNN=SECONDS[,...]``; ValueError in one line (``WHAT — WHAT TO DO``) for an
    unknown metric, a percentile outside (0, 100), a limit that is not a positive finite
    number of seconds up to a day, or a target given twice."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ValueError(f"an SLO names at least one target, got {text!r} — {FORM}")
    targets: list[Target] = []
    for item in items:
        name, eq, value = item.partition("=")
        m = _TARGET.fullmatch(name.strip().lower())
        if not eq or m is None or m.group("metric") not in METRICS:
            raise ValueError(
                f"unknown SLO target {item[:40]!r}; known metrics: "
                f"{', '.join(f'{x}-pNN' for x in METRICS)} — {FORM}"
            )
        pct = float(m.group("pct"))
        if not 0 < pct < 100:
            raise ValueError(f"{name.strip()!r}: a percentile is above 0 and below 100 — {FORM}")
        # ASCII digits only: float() would also read "２" (a full-width 2) and "1_0"
        word = value.strip()
        limit = float(word) if SECONDS.fullmatch(word) and len(word) <= 40 else math.nan
        if not (math.isfinite(limit) and 0 < limit <= MAX_LIMIT_S):
            raise ValueError(
                f"{item[:40]!r}: the limit must be a number of seconds above 0 and at most "
                f"{MAX_LIMIT_S:,g} — {FORM}"
            )
        target = Target(m.group("metric"), pct, limit)
        if any(t.name == target.name for t in targets):
            raise ValueError(f"{target.name} is given twice in {text!r} — give each target once")
        targets.append(target)
    return Slo(tuple(targets))


def allowed_exceeding(n: int, percentile: float) -> int:
    """How many of ``n`` values above a limit make their ``percentile`` exceed it for sure:
    numpy's linear interpolation reads the sorted values at ``lo = ⌊(n − 1)·p⌋`` and the one
    after, so once ``n − lo`` values exceed the limit, the value at ``lo`` does and so does the
    percentile. Over no value nothing is decided (1: no request is counted)."""
    if n <= 0:
        return 1
    return n - math.floor((n - 1) * percentile / 100.0)


def measure(
    slo: Slo,
    ttft: np.ndarray,
    arrival: np.ndarray,
    done_at: np.ndarray,
    output_tokens: np.ndarray,
) -> dict[str, float]:
    """Every metric the SLO names, and always ``ttft-p95``, ``ttft-p99`` and ``tpot-p95``
    (the tables' columns), from one fleet's per-request outcome. A percentile over no request
    (no request of two output tokens) is 0: nothing waits."""
    tpot = _tpot(ttft, arrival, done_at, output_tokens)
    wanted = {("ttft", 95.0), ("ttft", 99.0), ("tpot", 95.0)}
    wanted |= {(t.metric, t.percentile) for t in slo.targets}
    out = {}
    for metric, pct in sorted(wanted):
        values = ttft if metric == "ttft" else tpot
        value = float(np.percentile(values, pct)) if len(values) else 0.0
        out[Target(metric, pct, 1.0).name] = value
    return out


def _tpot(
    ttft: np.ndarray, arrival: np.ndarray, done_at: np.ndarray, output_tokens: np.ndarray
) -> np.ndarray:
    """Seconds per output token after the first, for requests of two output tokens or more."""
    many = output_tokens > 1
    decode = done_at[many] - (arrival[many] + ttft[many])
    return np.maximum(decode, 0.0) / (output_tokens[many] - 1)

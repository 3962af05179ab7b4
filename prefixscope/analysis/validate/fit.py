"""The effective capacity: the cache size whose simulation best explains the reported hits.

The criterion is the total absolute error, over the requests with a report, between the
simulated and the reported hit tokens (both rounded down to the comparison unit,
``reported.comparison_unit``): the capacity at which the simulator's mean absolute error is
smallest. Absolute rather than squared error, so that a few requests whose report no capacity
explains (a cache reset, a request served by another replica) weigh by how far off they are,
not by its square.

A *profile* gives that error at every candidate capacity for any weighting of the requests:

- ``ExactProfile`` (LRU): every capacity. A request's simulated hit tokens are a step function
  of the capacity (``depths.py``), so the error is too: it changes only at the depths where some
  request's hit grows by a block. Sorting those steps once gives the error on every interval of
  capacities between them, exactly; a weighting of the requests is one weighted sum per step.
- ``GridProfile`` (other policies): the simulator at a log-spaced grid of capacities, refined
  around the best one; each candidate stands for itself only.

The best capacities are every candidate of least error (an interval when the reports are those
of one LRU cache: a request's hits are monotone in C, so the capacities that explain every
request exactly are contiguous). The point estimate is the middle of them. Its range is a
percentile bootstrap over requests: in each resample (requests drawn with replacement, as
weights, so no simulation is repeated) the best capacities are found again, and the range runs
from the 2.5th percentile of their lower ends to the 97.5th of their upper ends, widened to hold
the best capacities of all requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from prefixscope.analysis.curves.curve import capacity_points
from prefixscope.analysis.curves.depths import NEVER
from prefixscope.analysis.trace.csr import Trace

#: The end of the last candidate when every larger capacity gives the same hits.
UNBOUNDED = NEVER
#: The share of resamples left out on each side of the range.
TAIL = 0.025


class Profile(Protocol):
    """Candidate capacities ``starts[j] .. ends[j]`` (sorted, ``starts[0] = 0``: no cache),
    the compared requests' reports (``reported``, int64), their simulated hit tokens in total
    at each candidate (``totals``), and the total absolute error at each candidate for
    per-request ``weights`` (one per compared request)."""

    method: str
    starts: np.ndarray
    ends: np.ndarray
    reported: np.ndarray

    @property
    def totals(self) -> np.ndarray: ...

    def errors(self, weights: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class ExactProfile:
    """LRU at every capacity. With no cache a request's error is its report; step ``i`` moves
    request ``step_request[i]``'s error by ``step_change[i]`` (and its hit tokens by
    ``step_gain[i]``) from candidate ``step_candidate[i]`` on. Sums of whole tokens stay exact
    in float64 (below 2**53)."""

    starts: np.ndarray
    ends: np.ndarray
    reported: np.ndarray
    step_request: np.ndarray
    step_candidate: np.ndarray
    step_change: np.ndarray
    step_gain: np.ndarray
    method: str = "exact"

    @property
    def totals(self) -> np.ndarray:
        gained = np.bincount(self.step_candidate, self.step_gain, minlength=len(self.starts))
        return np.rint(np.cumsum(gained)).astype(np.int64)

    def errors(self, weights: np.ndarray) -> np.ndarray:
        moved = np.bincount(
            self.step_candidate,
            weights=self.step_change * weights[self.step_request],
            minlength=len(self.starts),
        )
        return np.rint(float(self.reported @ weights) + np.cumsum(moved)).astype(np.int64)


@dataclass(frozen=True, eq=False)
class GridProfile:
    """The simulator at each candidate: ``simulated[j, i]`` is compared request ``i``'s hit
    tokens at ``starts[j]``; ``reported[i]`` its report."""

    starts: np.ndarray
    ends: np.ndarray
    simulated: np.ndarray
    reported: np.ndarray
    method: str = "grid"

    @property
    def totals(self) -> np.ndarray:
        return self.simulated.sum(axis=1)

    def errors(self, weights: np.ndarray) -> np.ndarray:
        return np.abs(self.simulated - self.reported[None, :]) @ weights.astype(np.int64)


def exact_profile(
    trace: Trace, depth: np.ndarray, reported: np.ndarray, compared: np.ndarray, unit: int
) -> ExactProfile:
    """The LRU error profile from each lookup's hit capacity (``depths.hit_capacities``);
    ``reported``: per request, in the comparison ``unit``; ``compared``: requests with one."""
    index = np.full(trace.n_requests, -1, np.int64)
    index[compared] = np.arange(int(compared.sum()))
    served = trace.served_sizes.astype(np.int64)
    through = np.cumsum(served)
    request = trace.request_of_lookup
    starts_at = trace.offsets[:-1]
    through -= np.r_[0, through][starts_at][request]  # tokens served up to this lookup
    after, before = through // unit * unit, (through - served) // unit * unit
    rep = reported[request]
    step = compared[request] & (depth != NEVER) & (after != before)
    depth, after, before, rep = depth[step], after[step], before[step], rep[step]
    depths, candidate = np.unique(depth, return_inverse=True)
    return ExactProfile(
        starts=np.r_[0, depths].astype(np.int64),
        ends=np.r_[depths - 1, UNBOUNDED].astype(np.int64),
        reported=reported[compared].astype(np.int64),
        step_request=index[request[step]],
        step_candidate=candidate.ravel() + 1,
        step_change=(np.abs(after - rep) - np.abs(before - rep)).astype(np.float64),
        step_gain=(after - before).astype(np.float64),
    )


def grid_profile(
    trace: Trace,
    hit_tokens_at: Callable[[int], np.ndarray],
    reported: np.ndarray,
    compared: np.ndarray,
    points: int = 24,
    rounds: int = 4,
    refine: int = 12,
) -> GridProfile:
    """The error at a log-spaced grid of capacities up to the trace's distinct blocks (where
    nothing is evicted), refined ``rounds`` times between the neighbours of the best one.
    ``hit_tokens_at(C)``: per request, its simulated hit tokens at C in the comparison unit."""
    top = max(trace.n_unique, 1)
    rep = reported[compared]
    simulated: dict[int, np.ndarray] = {}

    def evaluate(capacities: np.ndarray) -> None:
        for c in capacities:
            if int(c) not in simulated:
                simulated[int(c)] = hit_tokens_at(int(c))[compared] if c else np.zeros_like(rep)

    evaluate(np.r_[0, capacity_points(top, points)])
    for _ in range(rounds):
        caps = np.array(sorted(simulated))
        err = np.abs(np.stack([simulated[c] for c in caps]) - rep).sum(axis=1)
        j = int(np.argmin(err))
        lo, hi = caps[max(j - 1, 0)], caps[min(j + 1, len(caps) - 1)]
        new = np.setdiff1d(np.unique(np.linspace(lo, hi, refine + 2).astype(np.int64)), caps)
        if not len(new):
            break
        evaluate(new)
    caps = np.array(sorted(simulated), dtype=np.int64)
    ends = caps.copy()
    if caps[-1] >= top:
        ends[-1] = UNBOUNDED
    return GridProfile(caps, ends, np.stack([simulated[c] for c in caps]), rep)


@dataclass(frozen=True)
class Estimate:
    """The effective capacity (blocks): ``capacity_blocks``, the middle of the capacities that
    explain every compared request best (``best_low`` .. ``best_high``), and its range
    (``low_blocks`` .. ``high_blocks``); a high end of None: unbounded (no eviction explains the
    reports as well). ``curve_capacity_blocks``: the smallest capacity whose simulated hit
    tokens reach the reported total (None: none does); ``error``: the total absolute error at
    ``capacity_blocks``."""

    capacity_blocks: int
    best_low: int
    best_high: int | None
    low_blocks: int
    high_blocks: int | None
    curve_capacity_blocks: int | None
    error: int
    method: str
    resamples: int


def estimate(profile: Profile, resamples: int = 200, seed: int = 0) -> Estimate:
    """The best capacities of ``profile`` over every compared request, and a bootstrap of
    ``resamples`` draws of the requests (seeded: the same range on every run)."""
    n = len(profile.reported)
    errors = profile.errors(np.ones(n))
    lo, hi, best = _best(profile, errors)
    point = _middle(profile, best, lo, hi)
    low, high = lo, hi
    if resamples and n:
        rng = np.random.default_rng(seed)
        lows, highs = np.empty(resamples, np.int64), np.empty(resamples, np.int64)
        for b in range(resamples):
            weights = np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64)
            lows[b], highs[b], _ = _best(profile, profile.errors(weights))
        lows.sort()
        highs.sort()
        low = min(lo, int(lows[int(np.floor(TAIL * (resamples - 1)))]))
        high = max(hi, int(highs[int(np.ceil((1 - TAIL) * (resamples - 1)))]))
    reached = np.flatnonzero(profile.totals >= int(profile.reported.sum()))
    return Estimate(
        capacity_blocks=point,
        best_low=lo,
        best_high=None if hi == UNBOUNDED else hi,
        low_blocks=low,
        high_blocks=None if high == UNBOUNDED else high,
        curve_capacity_blocks=int(profile.starts[reached[0]]) if len(reached) else None,
        error=int(errors[_candidate(profile, point)]),
        method=profile.method,
        resamples=resamples if n else 0,
    )


def _best(profile: Profile, errors: np.ndarray) -> tuple[int, int, np.ndarray]:
    """The lowest and highest capacity of least error, and the candidates of least error."""
    best = np.flatnonzero(errors == errors.min())
    return int(profile.starts[best[0]]), int(profile.ends[best[-1]]), best


def _middle(profile: Profile, best: np.ndarray, lo: int, hi: int) -> int:
    """The middle of ``lo .. hi`` (``lo`` when unbounded), moved into the nearest candidate of
    least error when it falls between two."""
    mid = lo if hi == UNBOUNDED else lo + (hi - lo) // 2
    starts, ends = profile.starts[best], profile.ends[best]
    gap = np.maximum(starts - mid, 0) + np.maximum(mid - ends, 0)
    j = int(np.argmin(gap))
    return int(min(max(mid, starts[j]), ends[j]))


def _candidate(profile: Profile, capacity: int) -> int:
    """The candidate that stands for ``capacity``."""
    return int(np.searchsorted(profile.starts, capacity, side="right") - 1)

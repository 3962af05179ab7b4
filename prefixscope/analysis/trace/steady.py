"""Steady state from the data: where the warm-up ends, and a confidence interval after it.

The warm-up ends at the later of (a) the first request after which the cache held its capacity
and (b) the truncation point the MSER-5 rule (White, 1997) picks on per-interval token hit
rates: the series is cut into ``INTERVALS`` equal runs of requests, their hit rates are averaged
in batches of 5, and the truncation ``d`` that minimises ``Σ_{i>d} (Z_i - mean)² / (k - d)²``
over the first half of the batches is taken. After the warm-up, the token hit rate (hit tokens
over input tokens) has a 95% confidence interval by non-overlapping batch means: ``BATCHES``
contiguous batches of requests, their hit rates' mean ± t(0.975, BATCHES-1) · s/√BATCHES.

A cache that never filled has no steady state: such a result is flagged, not reported as one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INTERVALS = 100
MSER_BATCH = 5
BATCHES = 20
T_975 = {19: 2.093}  # Student t, 97.5% quantile, for BATCHES - 1 degrees of freedom


@dataclass(frozen=True)
class WarmUp:
    end: int  # first measured request (replay position)
    filled: bool  # the cache reached its capacity
    mser_end: int  # the MSER-5 truncation point alone


def _ratios(hit: np.ndarray, inp: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Hit rates of ``groups`` contiguous runs of near-equal request counts, and their bounds."""
    bounds = np.linspace(0, len(hit), groups + 1).astype(np.int64)
    h = np.add.reduceat(hit, bounds[:-1]) if len(hit) else np.zeros(groups)
    i = np.add.reduceat(inp, bounds[:-1]) if len(inp) else np.zeros(groups)
    empty = bounds[1:] == bounds[:-1]
    h, i = np.where(empty, 0, h), np.where(empty, 0, i)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(i > 0, h / np.maximum(i, 1), np.nan), bounds


def mser5(hit_tokens: np.ndarray, input_tokens: np.ndarray) -> int:
    """The request position where MSER-5 truncates the warm-up (0: no truncation)."""
    n = len(hit_tokens)
    if n < INTERVALS:
        return 0
    rates, bounds = _ratios(hit_tokens.astype(float), input_tokens.astype(float), INTERVALS)
    return mser5_truncation(rates, bounds)


def mser5_truncation(rates: np.ndarray, bounds: np.ndarray) -> int:
    """MSER-5 on the hit rates of ``INTERVALS`` runs of requests (``bounds``: their request
    positions); the one-pass curves call it with each capacity's interval rates."""
    k = INTERVALS // MSER_BATCH
    z = np.nanmean(rates[: k * MSER_BATCH].reshape(k, MSER_BATCH), axis=1)
    best, best_d = np.inf, 0
    for d in range(k // 2 + 1):
        tail = z[d:]
        score = float(np.sum((tail - tail.mean()) ** 2) / len(tail) ** 2)
        if score < best:
            best, best_d = score, d
    return int(bounds[best_d * MSER_BATCH])


def warm_up(
    hit_tokens: np.ndarray, input_tokens: np.ndarray, filled_at: int, bounded: bool
) -> WarmUp:
    mser = mser5(hit_tokens, input_tokens)
    if not bounded:  # an infinite cache is never full; its warm-up is MSER-5 alone
        return WarmUp(mser, True, mser)
    if filled_at < 0:
        return WarmUp(len(hit_tokens), False, mser)
    return WarmUp(max(filled_at + 1, mser), True, mser)


def batch_means_ci(hit_tokens: np.ndarray, input_tokens: np.ndarray) -> tuple[float, float] | None:
    """95% confidence interval of the token hit rate by batch means (None: too few requests)."""
    if len(hit_tokens) < 2 * BATCHES:
        return None
    rates, _ = _ratios(hit_tokens.astype(float), input_tokens.astype(float), BATCHES)
    rates = rates[~np.isnan(rates)]
    if len(rates) < 2:
        return None
    point = float(hit_tokens.sum() / max(input_tokens.sum(), 1))
    half = T_975.get(len(rates) - 1, 1.96) * float(np.std(rates, ddof=1)) / np.sqrt(len(rates))
    return point - half, point + half

"""A prefill cost model fitted to measurements: T(new, cached) with non-negative coefficients.

    T = a + b·max(new, k₁) + c·cached + e·max(new, k₂)·cached + f·new²

Each term is a mechanism: ``a`` the fixed cost of a forward (kernel launches, the LM head),
``b`` the linear layers, ``c`` reading the cached K and V, ``e`` attention of the new queries
against the cached keys, ``f`` attention among the new tokens (causal: about ``new²/2`` pairs).
The knees ``k₁`` and ``k₂`` are where a product turns from memory- to compute-bound: below
``k₁`` new rows the linear layers cost the weights' read whatever ``new`` (the roofline's
flat part), above it they grow with ``new``; likewise attention per cached key below and above
``k₂`` queries. With both knees at 1 the model is the plain polynomial
``a + b·new + c·cached + e·new·cached + f·new²``. A coefficient below zero has no meaning, so
each fit is non-negative least squares; the knees are chosen from a grid by the same criterion,
the *relative* squared error (each row divided by its measurement), so short prefills weigh as
much as long ones.

Pure numpy (no scipy): the GPU benchmark fits on a machine with torch and numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

TERMS = ("a", "new", "cached", "new_cached", "new_sq")
FORMULA = "a + b*max(new,k1) + c*cached + e*max(new,k2)*cached + f*new^2"
#: The layouts of the files the GPU benchmark writes (``gpu_replay/bench.py``, one model) and
#: the GPU check merges (``gpu_replay/check.py``, several): what ``calibrate`` reads.
BENCH_SCHEMA = "prefixscope-bench/1"
CHECK_SCHEMA = "prefixscope-gpu-check/1"
#: Knees the fit tries (tokens); 1 means no knee.
KNEES = (1, 16, 32, 64, 128, 256, 512, 1024, 2048)


def features(
    new: np.ndarray, cached: np.ndarray, knees: tuple[float, float] = (1, 1)
) -> np.ndarray:
    """The design matrix, one column per term of :data:`TERMS`."""
    new = np.asarray(new, dtype=np.float64)
    cached = np.asarray(cached, dtype=np.float64)
    lin, att = np.maximum(new, knees[0]), np.maximum(new, knees[1])
    return np.column_stack([np.ones_like(new), lin, cached, att * cached, new * new])


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """argmin ‖a·x − b‖ subject to x ≥ 0 (Lawson and Hanson's active-set method).

    Invariant: the passive set P holds the variables free to move; every x outside P is 0, and
    the least-squares solution on P is kept non-negative by stepping back along the segment to
    it whenever it would cross zero.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(a.shape)
    for _ in range(max_iter or 3 * n):
        w = a.T @ (b - a @ x)  # the gradient's negative: where the residual still points
        if passive.all() or w[~passive].max(initial=-np.inf) <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if z[passive].min() > 0:
                x = z
                break
            crossing = passive & (z <= 0)
            alpha = np.min(x[crossing] / (x[crossing] - z[crossing]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x


@dataclass(frozen=True)
class CostModel:
    """T(new, cached) in seconds, with its fit quality on samples it was not fitted on."""

    coefficients: tuple[float, ...]  # one per TERMS entry, each ≥ 0
    knees: tuple[float, float] = (1, 1)  # k₁ (linear layers), k₂ (attention), tokens
    fit_samples: int = 0
    holdout_samples: int = 0
    holdout_median_pct_err: float | None = None
    holdout_p90_pct_err: float | None = None

    def seconds(self, new: np.ndarray, cached: np.ndarray) -> np.ndarray:
        return features(new, cached, self.knees) @ np.asarray(self.coefficients)


def abs_pct_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return 100.0 * np.abs(np.asarray(predicted) - measured) / np.asarray(measured)


def fit_coefficients(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the relative squared error of ``x·c ≈ y``."""
    if (y <= 0).any():
        raise ValueError("every measured time must be positive")
    scale = x.max(axis=0)  # columns span 1 to 1e9: scale them to 1 for a well-posed solve
    scale[scale == 0] = 1.0
    return nnls(x / scale / y[:, None], np.ones_like(y)) / scale


def fit(
    new: Sequence[float],
    cached: Sequence[float],
    seconds: Sequence[float],
    knees: Sequence[float] = KNEES,
) -> CostModel:
    """The best model over the knee grid: the lowest relative squared error on these points."""
    new_a, cached_a = np.asarray(new, dtype=np.float64), np.asarray(cached, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    best: tuple[float, CostModel] | None = None
    for k1 in knees:
        for k2 in knees:
            x = features(new_a, cached_a, (k1, k2))
            coef = fit_coefficients(x, y)
            loss = float((((x @ coef) - y) / y) @ (((x @ coef) - y) / y))
            if best is None or loss < best[0] - 1e-12:  # ties keep the smaller knees
                best = (loss, CostModel(tuple(float(c) for c in coef), (k1, k2), len(y)))
    assert best is not None
    return best[1]


def holdout_mask(n: int, share: float = 0.25, seed: int = 0) -> np.ndarray:
    """A fixed random ``share`` of ``n`` samples (at least one, and never all) to hold out."""
    k = min(max(1, round(n * share)), n - 1) if n > 1 else 0
    mask = np.zeros(n, dtype=bool)
    mask[np.random.default_rng(seed).permutation(n)[:k]] = True
    return mask


def fit_with_holdout(
    new: Sequence[float],
    cached: Sequence[float],
    seconds: Sequence[float],
    held_out: np.ndarray | None = None,
) -> CostModel:
    """Fit on the samples not held out; report the absolute % errors on the held-out ones."""
    new_a, cached_a, y = (np.asarray(v, dtype=np.float64) for v in (new, cached, seconds))
    held = holdout_mask(len(y)) if held_out is None else np.asarray(held_out, dtype=bool)
    model = replace(fit(new_a[~held], cached_a[~held], y[~held]), holdout_samples=int(held.sum()))
    if not held.any():
        return model
    err = abs_pct_errors(model.seconds(new_a[held], cached_a[held]), y[held])
    return replace(
        model,
        holdout_median_pct_err=float(np.median(err)),
        holdout_p90_pct_err=float(np.percentile(err, 90)),
    )

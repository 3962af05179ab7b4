"""The cost model's fit: non-negative least squares, exact on noiseless data, honest held-out
errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from prefixscope.analysis.cost import costmodel


def brute_force_nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The best non-negative solution over every support set, by enumeration."""
    best, best_x = np.inf, np.zeros(a.shape[1])
    for k in range(a.shape[1] + 1):
        for support in itertools.combinations(range(a.shape[1]), k):
            x = np.zeros(a.shape[1])
            if support:
                x[list(support)] = np.linalg.lstsq(a[:, support], b, rcond=None)[0]
            if (x >= -1e-12).all():
                r = float(np.sum((a @ x - b) ** 2))
                if r < best - 1e-12:
                    best, best_x = r, x
    return best_x


@pytest.mark.parametrize("seed", range(8))
def test_nnls_matches_enumeration_of_supports(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(12, 4))
    b = rng.normal(size=12)
    x = costmodel.nnls(a, b)
    assert (x >= 0).all()
    np.testing.assert_allclose(x, brute_force_nnls(a, b), atol=1e-8)


def test_the_fit_recovers_known_coefficients_and_knees() -> None:
    truth = costmodel.CostModel((2e-3, 5e-6, 1e-8, 2e-10, 1e-11), knees=(256, 64))
    new = np.array([16, 64, 256, 1024, 4096] * 5, dtype=float)
    cached = np.repeat([0, 512, 2048, 8192, 32768], 5).astype(float)
    fitted = costmodel.fit(new, cached, truth.seconds(new, cached))
    assert fitted.knees == (256, 64)
    np.testing.assert_allclose(fitted.coefficients, truth.coefficients, rtol=1e-6)


def test_a_term_that_would_be_negative_is_zero() -> None:
    new = np.array([10, 20, 40, 80, 160], dtype=float)
    cached = np.zeros(5)
    seconds = 1.0 - 1e-3 * new  # falls with new: no non-negative model can follow
    fitted = costmodel.fit(new, cached, seconds, knees=(1,))
    assert all(c >= 0 for c in fitted.coefficients)
    assert fitted.coefficients[1] == 0


def test_held_out_errors_are_measured_on_held_out_points_only() -> None:
    truth = costmodel.CostModel((1e-3, 1e-6, 0.0, 1e-10, 0.0))
    new = np.arange(1, 41, dtype=float) * 50
    cached = np.tile([0.0, 1000.0, 4000.0, 9000.0], 10)
    seconds = truth.seconds(new, cached)
    held = costmodel.holdout_mask(len(new), 0.25, seed=3)
    seconds_noisy = seconds.copy()
    seconds_noisy[held] *= 1.2  # the held-out points are 20% off what the model can say
    m = costmodel.fit_with_holdout(new, cached, seconds_noisy, held)
    assert (m.fit_samples, m.holdout_samples) == (30, 10)
    assert m.holdout_median_pct_err == pytest.approx(100 * (1 - 1 / 1.2), rel=1e-6)


def test_holdout_mask_never_holds_out_everything() -> None:
    assert costmodel.holdout_mask(1).sum() == 0
    assert costmodel.holdout_mask(2).sum() == 1
    assert costmodel.holdout_mask(40, 0.25).sum() == 10
    with pytest.raises(ValueError, match="positive"):
        costmodel.fit([1, 2], [0, 0], [1.0, 0.0])

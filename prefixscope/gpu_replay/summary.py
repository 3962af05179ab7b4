"""A benchmark's results in figures: the table it prints, the fitted cost model with its
held-out error, achieved FLOP/s, the share of the roofline, and what the CUDA graph gains.

numpy and the standard library only (it also runs where the figures are merged).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict

import numpy as np

from prefixscope.analysis.cost import costmodel
from prefixscope.gpu_replay.runner import ShapeResult

#: The cost model must predict held-out points within this median error (percent).
TARGET_MEDIAN_PCT_ERR = 10.0


def table(results: Sequence[ShapeResult]) -> str:
    lines = [
        f"{'cached':>7} {'new':>6} {'miss ms':>9} {'hit ms':>9} {'miss/hit':>8} "
        f"{'miss TF/s':>9} {'hit TF/s':>8} {'miss roof':>9} {'hit roof':>8} {'graph x':>7}"
    ]
    for r in results:
        gain = f"{r.hit_eager_s / r.hit_s:>7.2f}" if r.hit_eager_s else f"{'-':>7}"
        lines.append(
            f"{r.cached_tokens:>7,} {r.new_tokens:>6,} {r.miss_s * 1e3:>9.3f} "
            f"{r.hit_s * 1e3:>9.3f} {r.miss_s / r.hit_s:>8.2f} "
            f"{r.miss_flops / r.miss_s / 1e12:>9.3g} {r.hit_flops / r.hit_s / 1e12:>8.3g} "
            f"{r.miss_roofline_s / r.miss_s:>9.0%} {r.hit_roofline_s / r.hit_s:>8.0%} {gain}"
        )
    return "\n".join(lines)


def fit_points(results: Sequence[ShapeResult]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One point per miss (distinct lengths) and per hit with something cached."""
    points: dict[tuple[int, int], list[float]] = {}
    for r in results:
        points.setdefault((r.input_tokens, 0), []).append(r.miss_s)
        if r.cached_tokens:
            points.setdefault((r.new_tokens, r.cached_tokens), []).append(r.hit_s)
    keys = sorted(points)
    return (
        np.array([k[0] for k in keys], dtype=np.float64),
        np.array([k[1] for k in keys], dtype=np.float64),
        np.array([float(np.median(points[k])) for k in keys]),
    )


def roofline_shares(results: Sequence[ShapeResult]) -> np.ndarray:
    """Roofline time / measured time of every miss and every hit."""
    miss = [r.miss_roofline_s / r.miss_s for r in results]
    return np.array(miss + [r.hit_roofline_s / r.hit_s for r in results], dtype=np.float64)


def fitted(results: Sequence[ShapeResult], seed: int = 0) -> dict[str, object]:
    """The cost model fitted on three points in four, its error on the held-out fourth."""
    new, cached, secs = fit_points(results)
    held = costmodel.holdout_mask(len(secs), 0.25, seed=seed)
    model = costmodel.fit_with_holdout(new, cached, secs, held)
    return {
        "formula": costmodel.FORMULA,
        "terms": list(costmodel.TERMS),
        **asdict(model),
        "roofline_share": float(np.median(roofline_shares(results))),
        "max_input_tokens": int(max(r.input_tokens for r in results)),
        "held_out_points": [
            {"new": int(n), "cached": int(c), "seconds": float(s)}
            for n, c, s, h in zip(new, cached, secs, held, strict=True)
            if h
        ],
    }


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max())}


def figures(results: Sequence[ShapeResult]) -> dict[str, object]:
    """Achieved TFLOP/s (analytic FLOPs / measured time), share of the roofline, and the CUDA
    graph's gain on the hit (eager time / graphed time), each as median, min and max."""
    return {
        "miss_tflops": _spread([r.miss_flops / r.miss_s / 1e12 for r in results]),
        "hit_tflops": _spread([r.hit_flops / r.hit_s / 1e12 for r in results]),
        "miss_roofline_share": _spread([r.miss_roofline_s / r.miss_s for r in results]),
        "hit_roofline_share": _spread([r.hit_roofline_s / r.hit_s for r in results]),
        "cuda_graph_gain": _spread([r.hit_eager_s / r.hit_s for r in results if r.hit_eager_s]),
    }


def verdict(cost_model: Mapping[str, object], seconds: float) -> str:
    median = cost_model.get("holdout_median_pct_err")
    p90 = cost_model.get("holdout_p90_pct_err")
    if not isinstance(median, float) or not isinstance(p90, float):
        return f"cost model {costmodel.FORMULA}: nothing held out; {seconds:.1f} s"
    ok = median <= TARGET_MEDIAN_PCT_ERR
    return (
        f"cost model {costmodel.FORMULA}, knees {tuple(cost_model['knees'])}: held-out "  # type: ignore[call-overload]
        f"{cost_model['holdout_samples']} points, median |error| {median:.1f}%, p90 {p90:.1f}% "
        f"({'within' if ok else 'above'} the {TARGET_MEDIAN_PCT_ERR:.0f}% target); {seconds:.1f} s"
    )

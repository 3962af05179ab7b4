"""Benchmark: how many usable reports an effective-capacity fit needs.

A generated gateway log (``prefixscope.synthetic_gateway``, 635 requests, 8,106 distinct blocks
of 16 tokens) carries the cached tokens a plain-Python LRU engine cache of 1,234 blocks reported,
15% of them garbled (a random share of the prompt). For each n, 30 random subsets of n requests
keep their reports (the others carry none) and ``validate`` fits the capacity with a 95%
bootstrap range of 200 resamples. Printed per n: how often the range holds the truth, the
median width of the range and the median and worst error of the capacity found, as shares of
the truth. ``tables.MIN_FIT_REPORTS`` is chosen from this table.

    .venv/bin/python benchmarks/validate_min_reports.py     # about a minute
"""

from __future__ import annotations

import numpy as np

from prefixscope.analysis.validate.reported import MISSING, Reported
from prefixscope.analysis.validate.tables import validate
from prefixscope.synthetic_gateway import Draft, GatewayWorkload, engine_reports

TRUTH = 1_234
SUBSETS = 30


def main() -> None:
    trace = Draft.build(GatewayWorkload(sessions=150, mean_gap_s=120.0), seed=3).trace
    reports = engine_reports(trace, np.full(trace.n_requests, TRUTH, np.int64))
    rng = np.random.default_rng(0)
    garbled = rng.random(trace.n_requests) < 0.15
    share = rng.random(int(garbled.sum()))
    reports[garbled] = (share * trace.input_tokens[garbled]).astype(np.int64) // 16 * 16
    for n in (10, 25, 50, 100, 200, 400):
        held, widths, errors = 0, [], []
        for _ in range(SUBSETS):
            keep = np.zeros(trace.n_requests, bool)
            keep[rng.choice(trace.n_requests, n, replace=False)] = True
            # the fit alone, whatever the floor on usable reports (which this table sizes)
            est = validate(
                trace, Reported(np.where(keep, reports, MISSING)), resamples=200, min_reports=1
            ).estimate
            assert est is not None
            high = est.high_blocks if est.high_blocks is not None else np.inf
            held += est.low_blocks <= TRUTH <= high
            widths.append((high - est.low_blocks) / TRUTH)
            errors.append(abs(est.capacity_blocks - TRUTH) / TRUTH)
        print(
            f"n = {n}: the range holds the truth in {held} of {SUBSETS}; median range width "
            f"{np.median(widths):.2f} of the truth; capacity error median {np.median(errors):.2f}, "
            f"worst {max(errors):.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

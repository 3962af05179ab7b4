"""Grid curves: the simulator itself at each capacity, for policies that are not stack
algorithms. Each point is ``simulate``'s own figure (its hit tokens, windows and warm-up)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prefixscope.analysis.curves.curve import Curve, Measured
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.fanout import fan_out
from prefixscope.analysis.policies import PolicyOptions
from prefixscope.analysis.simulation.replay import replay
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import FLEET, hit_tokens, members
from prefixscope.analysis.trace.steady import warm_up
from prefixscope.analysis.trace.windows import STEADY, WINDOWS


def _measure_point(trace, policy, capacity, isolation, windows, quota_file, ttl_s) -> list:  # type: ignore[no-untyped-def]
    """(window, tenant, requests, input tokens, hit tokens) at one capacity, by ``simulate``'s
    own rules (its hit tokens, windows and warm-up)."""
    options = PolicyOptions(ttl_s=ttl_s)
    outcome = replay(trace, policy, capacity, options, isolation, quota_file)
    tokens = hit_tokens(trace, outcome.hit_blocks)
    rows = []
    for w in windows:
        if w == STEADY:
            wu = warm_up(tokens, trace.input_tokens, outcome.filled_at, True)
            measured = np.arange(trace.n_requests) >= wu.end
        else:
            measured = WINDOWS[w](trace)
        for name, code in members(trace, measured) if measured.any() else [(FLEET, -1)]:
            sel = measured if code < 0 else measured & (trace.tenant_codes == code)
            rows.append(
                (
                    w,
                    name,
                    int(sel.sum()),
                    int(trace.input_tokens[sel].sum()),
                    int(tokens[sel].sum()),
                )
            )
    return rows


def grid_curve(trace: Trace, points: np.ndarray, settings: CurveSettings) -> Curve:
    """The simulator at each capacity of ``points``, in parallel: one process per core (or
    ``settings.workers``), or the workers of a running Dask cluster (``settings.dask_address``);
    results come back in capacity order, so the curve is the same wherever the points ran."""
    jobs = [
        (
            settings.policy,
            int(c),
            settings.isolation,
            settings.windows,
            settings.quota_file,
            settings.ttl_s,
        )
        for c in points
    ]
    results = fan_out(
        _point_of, trace, jobs, workers=settings.workers, dask_address=settings.dask_address
    )
    return collect_grid(points, results)


def _point_of(trace: Trace, job: tuple) -> list:
    return _measure_point(trace, *job)


def collect_grid(points: np.ndarray, results: Sequence[list]) -> Curve:
    """Per-capacity results (as from :func:`_measure_point`) as one curve; a group absent at a
    capacity (no measured request there) counts zero."""
    keys: dict[tuple[str, str], int] = {}
    for rows in results:
        for w, name, *_ in rows:
            keys.setdefault((w, name), len(keys))
    sums = np.zeros((len(keys), 3, len(points)), np.int64)
    for j, rows in enumerate(results):
        for w, name, req, inp, hit in rows:
            sums[keys[(w, name)], :, j] = (req, inp, hit)
    curve = Curve(np.asarray(points, dtype=np.int64))
    for (w, name), i in keys.items():
        curve.groups.append(Measured(name, w, sums[i, 0], sums[i, 1], sums[i, 2]))
    return curve

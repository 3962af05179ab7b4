"""The exact LRU curve from one pass over a trace (``stack.py``): every window but ``steady``
by request masks, ``steady`` per capacity as ``simulate`` defines it, and each tenant's own
cache under ``partitioned``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prefixscope.analysis.curves import stack
from prefixscope.analysis.curves.curve import Curve, Measured, capacity_points
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import quotas, subset
from prefixscope.analysis.trace.measure import FLEET, members
from prefixscope.analysis.trace.steady import INTERVALS, mser5_truncation
from prefixscope.analysis.trace.windows import STEADY, WINDOWS


def lru_curve(
    trace: Trace,
    points: np.ndarray,
    windows: Sequence[str],
    masks: dict[str, np.ndarray] | None = None,
) -> Curve:
    """Exact LRU hit tokens at every capacity in ``points`` (sorted), for the fleet and each
    tenant over each window, from one pass over ``trace``. ``masks``: the measured requests of
    each window when ``trace`` is part of a larger one (its windows are the whole trace's)."""
    points = np.asarray(points, dtype=np.int64)
    plain, groups = window_groups(trace, windows, masks)
    hist, buckets = stack.trace_stack_curve(trace, points, groups, STEADY in windows)
    # Hits at points[j]: the lookups whose bucket is at most j.
    hits = np.cumsum(hist, axis=2)[:, :, : len(points)]
    out = Curve(points)
    for row, w in enumerate(plain):
        mask = groups[row] >= 0
        for name, code in members(trace, mask):
            sel = mask if code < 0 else mask & (trace.tenant_codes == code)
            h = hits[row].sum(axis=0) if code < 0 else hits[row, code]
            out.groups.append(_constant(name, w, sel, trace, h))
    if STEADY in windows:
        out.groups.extend(_steady(trace, points, buckets))
    return out


def window_groups(
    trace: Trace, windows: Sequence[str], masks: dict[str, np.ndarray] | None = None
) -> tuple[list[str], np.ndarray]:
    """The windows measured by request (all but ``steady``), and per such window (a row) each
    request's tenant code where the window measures it, -1 where it does not."""
    plain = [w for w in windows if w != STEADY]
    masks = masks or {w: WINDOWS[w](trace) for w in plain}
    groups = np.full((len(plain), trace.n_requests), -1, np.int32)
    for row, w in enumerate(plain):
        mask = masks[w]
        groups[row, mask] = trace.tenant_codes[mask]
    return plain, groups


def _constant(name: str, window: str, sel: np.ndarray, trace: Trace, hits: np.ndarray) -> Measured:
    """A group whose measured requests are the same at every capacity."""
    k = len(hits)
    return Measured(
        name,
        window,
        np.full(k, int(sel.sum()), np.int64),
        np.full(k, int(trace.input_tokens[sel].sum()), np.int64),
        np.asarray(hits, dtype=np.int64),
    )


def filled_at(trace: Trace, points: np.ndarray) -> np.ndarray:
    """Per capacity, the first request after which an LRU cache of it is full (-1: never).
    LRU evicts only above capacity, so it holds ``min(C, distinct blocks seen)`` blocks."""
    first = trace.first_lookup
    new_blocks = np.bincount(trace.request_of_lookup[first], minlength=trace.n_requests)
    seen = np.cumsum(new_blocks)
    at = np.searchsorted(seen, points, side="left")
    return np.where(at < trace.n_requests, at, -1)


def _steady(trace: Trace, points: np.ndarray, buckets: np.ndarray) -> list[Measured]:
    """The ``steady`` window per capacity, exactly as ``simulate`` defines it: from the later of
    the fill point and the MSER-5 truncation of the fleet's token hit rate at that capacity."""
    n, k = trace.n_requests, len(points)
    bounds = np.linspace(0, n, INTERVALS + 1).astype(np.int64)
    interval = np.searchsorted(bounds, np.arange(n), side="right") - 1
    per = stack.tally(
        buckets,
        trace.offsets,
        trace.servable_tokens,  # token weights: the last-token rule (csr.py)
        trace.block_size,
        interval.astype(np.int32)[None, :],
        INTERVALS,
        k + 1,
    )[0]
    interval_hits = np.cumsum(per, axis=1)[:, :k].astype(float)  # (interval, point)
    interval_inp = np.bincount(interval, weights=trace.input_tokens, minlength=INTERVALS)
    fill = filled_at(trace, points)
    starts = np.empty(k, np.int64)
    for j in range(k):
        mser = 0
        if n >= INTERVALS:
            with np.errstate(invalid="ignore", divide="ignore"):
                rates = np.where(
                    interval_inp > 0, interval_hits[:, j] / np.maximum(interval_inp, 1), np.nan
                )
            mser = mser5_truncation(rates, bounds)
        starts[j] = max(fill[j] + 1, mser) if fill[j] >= 0 else n
    hits = stack.suffix_tally(
        buckets,
        trace.offsets,
        trace.servable_tokens,  # token weights: the last-token rule (csr.py)
        trace.block_size,
        trace.tenant_codes,
        len(trace.tenants),
        starts,
    )
    after = np.arange(n)[None, :] >= starts[:, None]  # (point, request)
    out = []
    for name, code in members(trace, np.ones(n, bool)):
        sel = after if code < 0 else after & (trace.tenant_codes == code)[None, :]
        out.append(
            Measured(
                name,
                STEADY,
                sel.sum(axis=1).astype(np.int64),
                (sel * trace.input_tokens[None, :]).sum(axis=1).astype(np.int64),
                hits.sum(axis=0) if code < 0 else hits[code],
            )
        )
    return out


def partitioned_lru_curve(
    trace: Trace, points: np.ndarray, windows: Sequence[str], n_points: int, quota_file: str | None
) -> tuple[Curve, list[Curve]]:
    """Each tenant its own LRU cache: one pass per tenant's requests. Returns the fleet's curve
    over the fleet's capacity ``C`` (each tenant holding ``max(1, floor(share · C))`` blocks, as
    ``simulate --isolation partitioned``) and each tenant's curve over its own cache's size."""
    shares = quotas(trace, quota_file)
    fleet_hits: dict[str, np.ndarray] = {}
    tenant_curves = []
    for code, share in enumerate(shares):
        rows = np.flatnonzero(trace.tenant_codes == code)
        if len(rows) == 0:
            continue
        part = subset(trace, rows)
        quota = np.maximum(1, (share * points).astype(np.int64))
        own = capacity_points(part.n_unique, n_points)
        axis = np.unique(np.concatenate([own, quota]))
        curve = lru_curve(part, axis, windows, {w: WINDOWS[w](trace)[rows] for w in windows})
        at_quota = np.searchsorted(axis, quota)
        for g in curve.groups:
            if g.tenant == FLEET:
                prev = fleet_hits.get(g.window, 0)
                fleet_hits[g.window] = prev + g.hit_tokens[at_quota]
        keep = np.isin(axis, own)
        tenant_curves.append(
            Curve(
                axis[keep],
                [
                    Measured(
                        g.tenant,
                        g.window,
                        g.requests[keep],
                        g.input_tokens[keep],
                        g.hit_tokens[keep],
                    )
                    for g in curve.groups
                    if g.tenant != FLEET
                ],
            )
        )
    fleet = Curve(points)
    for w in windows:
        sel = WINDOWS[w](trace)
        fleet.groups.append(
            _constant(FLEET, w, sel, trace, fleet_hits.get(w, np.zeros(len(points))))
        )
    return fleet, tenant_curves

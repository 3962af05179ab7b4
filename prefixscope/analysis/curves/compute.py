"""Every row of the ``mrc`` table from a trace or a block sample: the one place that picks
the exact, grid or sampled computation."""

from __future__ import annotations

import pyarrow as pa

from prefixscope.analysis.curves.block_sampling import BlockSample
from prefixscope.analysis.curves.curve import (
    Curve,
    capacity_points,
    curve_table,
    sampled_capacities,
    with_drawn_blocks,
)
from prefixscope.analysis.curves.exact import lru_curve, partitioned_lru_curve
from prefixscope.analysis.curves.grid import grid_curve
from prefixscope.analysis.curves.sampled import compute_sampled_curves
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import salted


def compute(source: Trace | BlockSample, settings: CurveSettings) -> pa.Table:
    """The ``mrc`` rows of a trace (exact, or a family sample) or of a block sample."""
    if isinstance(source, BlockSample):
        return compute_sampled_curves(source, settings)
    return compute_curves(source, settings)


def compute_curves(trace: Trace, settings: CurveSettings) -> pa.Table:
    """Every row of the ``mrc`` table for ``trace`` (a family sample when
    ``settings.sample_rate < 1``: its capacities are then scaled by ``1 / rate``; a block
    sample goes to ``sampled_curve.compute_sampled_curves``)."""
    settings.check()
    if settings.by_block:
        raise ValueError("a block-sampled curve is computed from a BlockSample")
    keyed = salted(trace) if settings.isolation == "salted" else trace
    asked = sampled_capacities(settings)
    points = capacity_points(keyed.n_unique, settings.n_points, asked)
    curves: list[Curve] = []
    if settings.stack and settings.isolation == "partitioned":
        fleet, tenants = partitioned_lru_curve(
            trace, points, settings.windows, settings.n_points, settings.quota_file
        )
        curves = [fleet, *tenants]
    elif settings.stack:
        curves = [lru_curve(keyed, points, settings.windows)]
    else:
        curves = [grid_curve(trace, points, settings)]
    if settings.sample_rate < 1:  # a family sample: no interval, the blocks it rests on
        curves = [with_drawn_blocks(c, keyed) for c in curves]
    return curve_table(trace.block_size, curves, settings)

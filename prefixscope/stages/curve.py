"""Stage ``curve``: the token hit rate at every capacity, fleet and per tenant → ``mrc``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.curves.block_sampling import BlockSample, load_block_sample
from prefixscope.analysis.curves.compute import compute
from prefixscope.analysis.curves.sampling import load_sampled_trace
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace


@dataclass(frozen=True)
class CurveStageSettings:
    """``curve``: what is computed; ``points``: capacities to add to it (blocks, tokens or GiB
    of a model, resolved against the warehouse's block size)."""

    curve: CurveSettings = field(default_factory=CurveSettings)
    points: Capacities | None = None


@dataclass(frozen=True)
class CurveResult:
    run_id: str
    table: pa.Table


def run(wh: str | Path, settings: CurveStageSettings) -> CurveResult:
    curve = settings.curve
    curve.check()
    with warehouse.StageRun(wh, "curve", settings) as run:
        source: Trace | BlockSample
        with run.reading() as con:
            if curve.by_block:
                source = load_block_sample(con, curve.sample_rate, curve.head, curve.hot)
            elif curve.sample_rate < 1:
                source = load_sampled_trace(con, curve.sample_rate)
            else:
                source = load_trace(con)
        block_size = source.block_size if isinstance(source, Trace) else source.trace.block_size
        if settings.points is not None:
            blocks, _ = settings.points.resolve(block_size)
            curve = replace(
                curve,
                capacities=tuple(blocks),
                model=curve.model or settings.points.model,
                model_config=curve.model_config or settings.points.model_config,
            )
        table = compute(source, curve)
        with run.publishing() as con:
            warehouse.append(con, "mrc", table, run.run_id)
    return CurveResult(run.run_id, table)

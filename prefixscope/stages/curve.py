"""Stage ``curve``: the token hit rate at every capacity, fleet and per tenant → ``mrc``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from prefixscope import warehouse
from prefixscope.analysis.curves.block_sampling import BlockSample, load_block_sample
from prefixscope.analysis.curves.compute import compute
from prefixscope.analysis.curves.sampling import load_sampled_trace
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import FLEET


@dataclass(frozen=True)
class CurveStageSettings:
    """``curve``: what is computed; ``points``: capacities to add to it (blocks, tokens or GiB
    of a model, resolved against the warehouse's block size)."""

    curve: CurveSettings = field(default_factory=CurveSettings)
    points: Capacities | None = None


#: Below this many sampled blocks (the fleet's) a sampled curve's error may be large: its
#: interval's coverage of the exact curve fell from 0.99 at 18,000 sampled blocks to 0.93 at
#: 1,600 and 0.84 at 130 (docs/simulation.md), and every depth is read among few blocks.
SAMPLED_BLOCKS_FLOOR = 1_000


@dataclass(frozen=True)
class CurveResult:
    """The run and its rows; ``warnings``: lines for the operator (a sample below the floor)."""

    run_id: str
    table: pa.Table
    warnings: tuple[str, ...] = ()


def sample_warnings(table: pa.Table, settings: CurveSettings) -> tuple[str, ...]:
    """The warnings of a sampled curve's rows, or an error when the sample drew no block: a
    curve of nothing, which would be written as no rows and read as no answer."""
    if settings.sample_rate == 1:
        return ()
    fleet = pc.filter(table, pc.equal(table["tenant"], FLEET))["sampled_blocks"]
    if len(fleet) == 0:
        raise ValueError(
            f"a sample at rate {settings.sample_rate:g} draws no block of this trace: there is "
            "no curve to estimate — raise --sample-rate, or drop it for the exact curve"
        )
    drawn = pc.min(fleet).as_py()
    if drawn is None or drawn >= SAMPLED_BLOCKS_FLOOR or (settings.by_block and drawn == 0):
        return ()  # (a block sample of 0 drawn blocks with rows keeps every block whole: exact)
    return (
        f"only {drawn:,} blocks sampled (floor {SAMPLED_BLOCKS_FLOOR:,}): the curve's error may "
        "be large — raise --sample-rate",
    )


def measure_curve(wh: str | Path, settings: CurveStageSettings) -> CurveResult:
    curve = settings.curve
    curve.check()
    with warehouse.StageRun(wh, "curve", settings) as stage_run:
        source: Trace | BlockSample
        with stage_run.reading() as con:
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
        warnings = sample_warnings(table, curve)  # an empty sample fails here: nothing written
        with stage_run.publishing() as con:
            warehouse.append(con, "mrc", table, stage_run.run_id)
    return CurveResult(stage_run.run_id, table, warnings)

"""``calibrate``: load a cost model measured on a GPU into the warehouse."""

from __future__ import annotations

import argparse

from prefixscope.cli import flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="FILE",
        help="JSON of benchmarks/gpu_check.sh or python -m prefixscope.gpu_replay.bench",
    )
    p.add_argument("--gpu", metavar="NAME", help="store under this GPU name (default: the file's)")


def calibrate(args: argparse.Namespace) -> int:
    from prefixscope.stages import calibrate as stage

    run_id, found = stage.calibrate_cost_models(
        args.warehouse, stage.CalibrateSettings(args.source, args.gpu)
    )
    for c in found:
        held = (
            "nothing held out"
            if c.holdout_median_pct_err is None or c.holdout_p90_pct_err is None
            else f"held-out median |error| {c.holdout_median_pct_err:.1f}%, "
            f"p90 {c.holdout_p90_pct_err:.1f}% over {c.holdout_points} points"
        )
        print(f"calibrated {c.model} on {c.gpu} ({c.device}, {c.dtype}): {held}")
    print(f"{len(found)} cost model(s) in miss_cost_models; run {run_id}")
    return 0


COMMAND = Command(
    "calibrate", "load a cost model measured on a GPU into the warehouse", arguments, calibrate
)

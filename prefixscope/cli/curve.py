"""``prefixscope curve``: the token hit rate at every capacity (the ``mrc`` table)."""

from __future__ import annotations

import argparse
import sys

from prefixscope.analysis.curves.settings import DEFAULT_SAMPLE_BY, SAMPLE_BY
from prefixscope.cli import flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument("--policy", default="lru", help="lru (exact, one pass) or fifo, lfu, ...")
    flags.windows(p, ["all"])
    p.add_argument("--isolation", default="shared", choices=["shared", "salted", "partitioned"])
    p.add_argument("--quota-file", metavar="FILE", help="partitioned: tenant,share lines")
    p.add_argument(
        "--sample-rate",
        type=flags.finite_float(0.0, 1.0),
        default=1.0,
        metavar="R",
        help="estimate from a sample of a share R, capacities scaled by 1/R (1: exact)",
    )
    p.add_argument(
        "--sample-by",
        default=DEFAULT_SAMPLE_BY,
        choices=SAMPLE_BY,
        help="what a sample keeps (lru: block-hot, block, block-head; any policy: family): "
        "blocks by hash with the hot blocks kept whole (default), blocks by hash, blocks with "
        "the first block of every request kept whole, or whole prefix families",
    )
    p.add_argument(
        "--points",
        type=flags.bounded_int(2, 100_000),
        help="log-spaced capacities (lru 256, others 24)",
    )
    flags.capacities(p, blocks_help="add points")
    p.add_argument(
        "--ttl", type=flags.finite_float(), metavar="SECONDS", help="ttl: idle time before a drop"
    )
    p.add_argument(
        "--workers", type=flags.bounded_int(1, 4096), help="grid curves: processes (one per core)"
    )
    p.add_argument(
        "--dask-address",
        metavar="tcp://HOST:PORT",
        help="grid curves: run the capacities on this running Dask cluster",
    )


def curve_command(args: argparse.Namespace) -> int:
    from prefixscope.analysis.curves.settings import CurveSettings
    from prefixscope.dashboards.text import format_curve
    from prefixscope.stages import curve

    settings = CurveSettings(
        policy=args.policy,
        windows=tuple(args.window),
        isolation=args.isolation,
        points=args.points,
        sample_rate=args.sample_rate,
        sample_by=args.sample_by,
        model=args.model,
        model_config=args.model_config,
        kv_dtype=args.kv_dtype,
        quota_file=args.quota_file,
        ttl_s=args.ttl,
        workers=args.workers,
        dask_address=args.dask_address,
    )
    result = curve.measure_curve(
        args.warehouse, curve.CurveStageSettings(settings, flags.capacities_of(args))
    )
    for line in result.warnings:
        print(f"prefixscope curve: warning: {line}", file=sys.stderr)
    print(format_curve(result.table))
    return 0


COMMAND = Command(
    "curve",
    "token hit rate at every cache capacity (the mrc table), per tenant",
    arguments,
    curve_command,
)

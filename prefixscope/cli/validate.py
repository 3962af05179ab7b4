"""``prefixscope validate``: the simulator beside the engines' reported cached tokens, and the
effective capacity that explains them (the ``validation`` tables)."""

from __future__ import annotations

import argparse

from prefixscope.analysis.validate.tables import FIT_POLICIES
from prefixscope.cli import flags
from prefixscope.cli.command import Command

#: Disagreeing requests printed (all ``--top`` are written to the warehouse).
PRINTED = 10


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--policy",
        default="lru",
        choices=list(FIT_POLICIES),
        help="the cache that explains the reports: lru exactly at every capacity, the others "
        "at a refined grid (lru)",
    )
    p.add_argument(
        "--engine-block-size",
        type=flags.block_size,
        metavar="TOKENS",
        help="the engines' KV block size (default: the common divisor of the reported counts)",
    )
    p.add_argument(
        "--top",
        type=flags.bounded_int(0, 100_000),
        default=20,
        metavar="N",
        help="the disagreeing requests kept (20)",
    )
    p.add_argument(
        "--resamples",
        type=flags.bounded_int(0, 10_000),
        default=200,
        metavar="N",
        help="bootstrap resamples of the capacity's range (200; 0: the best fit only)",
    )
    p.add_argument("--seed", type=flags.count, default=0, help="the bootstrap's seed (0)")
    flags.model(p, what=" for the capacity in GiB")


def run(args: argparse.Namespace) -> int:
    from prefixscope.dashboards.validation import summary_text
    from prefixscope.stages import validate
    from prefixscope.terminal import More

    result = validate.run(
        args.warehouse,
        validate.ValidateSettings(
            policy=args.policy,
            engine_block_size=args.engine_block_size,
            top=args.top,
            resamples=args.resamples,
            seed=args.seed,
            model=args.model,
            model_config=args.model_config,
            kv_dtype=args.kv_dtype,
        ),
    )
    more = More.of_latest(args.warehouse, "validation", "validate")
    print(
        summary_text(result.agreement.to_pylist(), result.disagreements.to_pylist()[:PRINTED], more)
    )
    return 0


COMMAND = Command(
    "validate",
    "compare simulated hits with the engines' reported cached tokens; the effective capacity",
    arguments,
    run,
)

"""``prefixscope structure``: turns, shared prefixes, hit sources, reuse breaks and times."""

from __future__ import annotations

import argparse

from prefixscope.cli import flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--capacity-blocks",
        type=flags.positive_int,
        default=16_000,
        metavar="N",
        help="capacity of the simulated configuration: lru, and pinned per prefix (%(default)s)",
    )
    p.add_argument(
        "--top", type=flags.positive_int, default=20, help="shared prefixes to keep (%(default)s)"
    )
    p.add_argument(
        "--simulate-top",
        type=flags.count,
        default=10,
        metavar="K",
        help="of those, how many to simulate pinned (%(default)s)",
    )
    p.add_argument(
        "--max-forks",
        type=flags.count,
        default=None,
        metavar="F",
        help="turn inference: continuations a parent's last full block may have (2)",
    )
    p.add_argument(
        "--loop-gap",
        type=flags.finite_float(0.0, 86_400.0, strict=False),
        default=None,
        metavar="SECONDS",
        help="agent sessions: the most idle time between a tool_use stop and the next request "
        "of a tool-call loop (10)",
    )


def structure_command(args: argparse.Namespace) -> int:
    from prefixscope.analysis.structure.tables import StructureSettings
    from prefixscope.dashboards.structure import format_structure
    from prefixscope.stages import structure
    from prefixscope.terminal import More

    settings = StructureSettings(
        capacity_blocks=args.capacity_blocks,
        top=args.top,
        simulate_top=args.simulate_top,
        **({"max_forks": args.max_forks} if args.max_forks is not None else {}),
        **({"loop_gap_s": args.loop_gap} if args.loop_gap is not None else {}),
    )
    result = structure.find_structure(args.warehouse, settings)
    print(f"structure run {result.run_id}")
    print(format_structure(result.tables, lambda t: More.of_run(args.warehouse, t, result.run_id)))
    return 0


COMMAND = Command(
    "structure",
    "conversation turns, shared prefixes, hit sources, reuse breaks and reuse times",
    arguments,
    structure_command,
)

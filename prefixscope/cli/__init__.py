"""The ``prefixscope`` command line: a table of commands, each a parser beside its handler
(one module per stage), every handler a thin call to a stage (``prefixscope.stages``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from prefixscope import __version__
from prefixscope.cli import cost, curve, flows, ingest, report, simulate, structure
from prefixscope.cli.command import Command

COMMANDS: tuple[Command, ...] = (
    ingest.COMMAND,
    simulate.COMMAND,
    curve.COMMAND,
    structure.COMMAND,
    report.COMMAND,
    *flows.COMMANDS,
    *cost.COMMANDS,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefixscope", description="What a prefix (KV) cache is really worth."
    )
    parser.add_argument("--version", action="version", version=f"prefixscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.arguments(sub.add_parser(command.name, help=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {c.name: c.run for c in COMMANDS}[args.command]
    try:
        return handler(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"prefixscope {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

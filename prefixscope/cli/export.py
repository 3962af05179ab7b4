"""``prefixscope export`` (the requests as a Mooncake or Bailian trace) and ``prefixscope
metrics`` (the latest figures as OpenMetrics text for Prometheus): docs/export.md."""

from __future__ import annotations

import argparse

from prefixscope.cli import flags
from prefixscope.cli.command import Command

EXPORT_FORMATS = ("bailian", "mooncake")


def salt(text: str) -> str:
    text = flags.utf8_text(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("the salt is empty — give a secret of your own")
    return text


def export_arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    p.add_argument(
        "--out",
        type=flags.out_file,
        default="trace.jsonl.gz",
        help="the trace file; gzip when it ends in .gz (%(default)s)",
    )
    p.add_argument(
        "--salt",
        type=salt,
        metavar="SECRET",
        help="number blocks by a hash keyed by SECRET: exports under other salts share no "
        "numbering (default: by first appearance)",
    )
    p.add_argument(
        "--tenant",
        type=flags.tenant_list,
        metavar="NAME[,NAME...]",
        help="only these tenants' requests (default: every request)",
    )
    p.add_argument(
        "--sessions",
        action="store_true",
        help="also write each request's session and previous turn (session_id, parent; "
        "Bailian's parent_chat_id): a replay tool that reads them re-sends earlier turns",
    )


def export_run(args: argparse.Namespace) -> int:
    from prefixscope.export.trace import ExportSettings, export_trace

    settings = ExportSettings(
        format=args.format,
        out=args.out,
        salt=args.salt,
        tenants=tuple(args.tenant) if args.tenant else None,
        sessions=args.sessions,
    )
    result = export_trace(args.warehouse, settings)
    rule = ", full blocks only" if result.full_blocks else ""
    if result.tails:
        rule += f" (and {result.tails:,} ids of partial tails, each on one line)"
    print(
        f"{result.out}: {result.requests:,} requests of {result.tenants:,} tenant(s), "
        f"{result.lookups:,} block ids ({result.blocks:,} distinct), "
        f"{result.block_size} tokens a block{rule}"
    )
    print(f"read it back with: {result.reingest()}")
    for line in result.replays():
        print(f"replay it with {line}")
    return 0


def metrics_arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--out",
        type=flags.out_file,
        required=True,
        metavar="FILE.prom",
        help="the OpenMetrics text file, e.g. in node_exporter's --collector.textfile.directory",
    )


def metrics_run(args: argparse.Namespace) -> int:
    from prefixscope.export.metrics import write_metrics

    result = write_metrics(args.warehouse, args.out)
    print(f"{result.out}: {result.samples:,} samples in {result.families} metric families")
    return 0


COMMANDS = (
    Command(
        "export",
        "write the requests as a Mooncake or Bailian trace (no text; block ids renumbered)",
        export_arguments,
        export_run,
    ),
    Command(
        "metrics",
        "write the latest figures as OpenMetrics text (node_exporter's textfile collector)",
        metrics_arguments,
        metrics_run,
    ),
)

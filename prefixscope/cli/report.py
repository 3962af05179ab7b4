"""``prefixscope report``: the self-contained report page."""

from __future__ import annotations

import argparse

from prefixscope.cli import flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument("--out", type=flags.out_file, default="report.html")


def report_command(args: argparse.Namespace) -> int:
    from prefixscope.stages import report

    print(f"report: {report.write_report(args.warehouse, report.ReportSettings(args.out))}")
    return 0


COMMAND = Command("report", "write the self-contained report page", arguments, report_command)

"""The ``prefixscope`` command line: a table of commands, each a parser beside its handler
(one module per stage), every handler a thin call to a stage (``prefixscope.stages``).

Every error a user can cause ends the command with one line on stderr,
``prefixscope CMD: error: WHAT — WHAT TO DO``, and exit status 2; an interrupt exits 130 with
one line; never a traceback (docs/operations.md).
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Sequence
from typing import NoReturn

import duckdb
import jinja2

from prefixscope import __version__, warehouse
from prefixscope.cli import (
    cost,
    curve,
    explain,
    flags,
    fleet,
    flows,
    ingest,
    plan,
    report,
    simulate,
    structure,
    validate,
)
from prefixscope.cli.command import Command

COMMANDS: tuple[Command, ...] = (
    ingest.COMMAND,
    simulate.COMMAND,
    fleet.COMMAND,
    plan.COMMAND,
    curve.COMMAND,
    structure.COMMAND,
    explain.COMMAND,
    validate.COMMAND,
    report.COMMAND,
    *flows.COMMANDS,
    *cost.COMMANDS,
)

#: Exit statuses: a user's error, an interrupt (128 + SIGINT), a bug.
EXIT_USAGE, EXIT_INTERRUPTED, EXIT_INTERNAL = 2, 130, 1


def one_line(text: object) -> str:
    return " ".join(str(text).split())


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line: ``PROG: error: MESSAGE — see PROG --help``."""

    def error(self, message: str) -> NoReturn:
        what = one_line(message)
        hint = "" if " — " in what else f" — see `{self.prog} --help`"
        self.exit(EXIT_USAGE, f"{self.prog}: error: {what}{hint}\n")


def _lock_timeout(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument(
        "--lock-timeout",
        type=flags.finite_float(0.0, 86_400.0, strict=False),
        default=default,
        metavar="SECONDS",
        help="how long to wait while another process writes the warehouse (60)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="prefixscope", description="What a prefix (KV) cache is really worth.")
    parser.add_argument("--version", action="version", version=f"prefixscope {__version__}")
    _lock_timeout(parser, warehouse.LOCK_TIMEOUT_S)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        command.arguments(p)
        _lock_timeout(p, argparse.SUPPRESS)  # also accepted after the command's name
    return parser


def describe(exc: BaseException) -> str:
    """The one line for an error a user can cause: what is wrong — what to do."""
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}) — re-encode it as UTF-8"
        )
    if isinstance(exc, duckdb.Error):
        if "No space left" in str(exc):
            return "no space left on the warehouse's device — free some space and run it again"
        return f"the warehouse refused it: {one_line(exc)[:300]} — check the warehouse and inputs"
    if isinstance(exc, OSError):
        name = f" {exc.filename}" if exc.filename else ""
        if exc.errno == errno.ENOSPC:
            where = f" of{name}" if name else ""
            return f"no space left on the device{where} — free some space and run it again"
        if isinstance(exc, IsADirectoryError):
            return f"{exc.filename} is a directory — give a file path"
        if isinstance(exc, PermissionError):
            return f"permission denied:{name} — give a path you may write, or fix its permissions"
        if isinstance(exc, FileNotFoundError) and not exc.filename:
            return _with_hint(one_line(exc))
        return f"{exc.strerror or one_line(exc)}:{name} — check the path"
    return _with_hint(one_line(exc))


def _with_hint(message: str) -> str:
    return message if " — " in message or "run `" in message else f"{message} — see --help"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    warehouse.LOCK_TIMEOUT_S = args.lock_timeout
    handler = {c.name: c.run for c in COMMANDS}[args.command]
    prog = f"prefixscope {args.command}"
    try:
        return handler(args)
    except (KeyboardInterrupt, duckdb.InterruptException):
        print(f"{prog}: interrupted — nothing more was written; run it again", file=sys.stderr)
        return EXIT_INTERRUPTED
    except jinja2.TemplateError as exc:
        print(f"{prog}: error: chat template: {one_line(exc)} — fix the template", file=sys.stderr)
        return EXIT_USAGE
    except (duckdb.Error, OSError, ValueError) as exc:
        print(f"{prog}: error: {describe(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as exc:
        if "interrupted" not in str(exc).lower():  # DuckDB's, when SIGINT lands in a query
            return _internal(prog, exc)
        print(f"{prog}: interrupted — nothing more was written; run it again", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        return _internal(prog, exc)


def _internal(prog: str, exc: BaseException) -> int:
    """A bug: one line, exit 1."""
    what = f"{type(exc).__name__}: {one_line(exc)[:300]}"
    print(f"{prog}: internal error: {what} (please report)", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

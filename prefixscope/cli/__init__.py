"""The ``prefixscope`` command line: a table of commands, each a parser beside its handler
(one module per stage), every handler a thin call to a stage (``prefixscope.stages``).

Every error a user can cause ends the command with one line on stderr,
``prefixscope CMD: error: WHAT — WHAT TO DO``, and exit status 2; an interrupt exits 130 with
one line; never a traceback (docs/operations.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import duckdb

from prefixscope import __version__, warehouse
from prefixscope.cli import flags
from prefixscope.cli.command import Command
from prefixscope.resources import ResourceError
from prefixscope.storage_errors import StorageCause, root_cause, storage_cause

#: Each module of this package that defines commands, with their names, in the order
#: ``prefixscope --help`` lists them (tests/test_cli.py checks the names against the modules).
#: A run imports only its command's module: the others pull in polars and the simulators,
#: which an ingest would only wait for.
MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ingest", ("ingest",)),
    ("events", ("capture-events",)),
    ("simulate", ("simulate",)),
    ("fleet", ("fleet",)),
    ("disagg", ("disagg",)),
    ("plan", ("plan",)),
    ("curve", ("curve",)),
    ("structure", ("structure",)),
    ("explain", ("explain",)),
    ("compare", ("compare",)),
    ("validate", ("validate",)),
    ("report", ("report",)),
    ("flows", ("fleet-report", "schedule")),
    ("cost", ("roofline", "replay", "savings")),
    ("deployment", ("deployment",)),
    ("calibrate", ("calibrate",)),
    ("export", ("export", "metrics")),
)


def commands(name: str | None = None) -> tuple[Command, ...]:
    """Every command, or (when ``name`` is one) only those of the module that defines it."""
    found: list[Command] = []
    for module_name, names in MODULES:
        if name is None or name in names:
            module = importlib.import_module(f"{__name__}.{module_name}")
            found += getattr(module, "COMMANDS", None) or (module.COMMAND,)
    return tuple(found)


def named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word after the global options, when that is a
    command's name; None when there is none, or when help is asked before it (which lists
    every command)."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--version"):
            return None
        if word == "--lock-timeout":
            next(words, None)
        elif not word.startswith("-"):
            return word if any(word in names for _, names in MODULES) else None
    return None


#: Exit statuses: a user's error, an interrupt (128 + SIGINT), a bug.
EXIT_USAGE, EXIT_INTERRUPTED, EXIT_INTERNAL = 2, 130, 1
#: The machine could not give what the run needed (a worker killed, a server gone).
EXIT_RESOURCE = 1
#: The output's reader went away (128 + SIGPIPE, as a shell reports it).
EXIT_PIPE = 141


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


def build_parser(available: Sequence[Command] | None = None) -> argparse.ArgumentParser:
    """The parser of ``available`` commands (default: all of them)."""
    # no abbreviated flags: `deployment --gpu FILE` would be read as --gpu-memory-utilization,
    # and a flag added later would change what an abbreviation means
    parser = Parser(
        prog="prefixscope",
        description="What a prefix (KV) cache is really worth.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"prefixscope {__version__}")
    _lock_timeout(parser, warehouse.LOCK_TIMEOUT_S)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands() if available is None else available:
        p = sub.add_parser(command.name, help=command.help, allow_abbrev=False)
        command.arguments(p)
        _lock_timeout(p, argparse.SUPPRESS)  # also accepted after the command's name
    return parser


def describe(exc: BaseException) -> str:
    """The one line for an error a user can cause: what is wrong — what to do. A disk problem
    (full, read-only, permission refused) is named wherever it lies along the error's chain,
    and an error that only reports what an earlier failure left (a rollback with no
    transaction) gives way to that failure."""
    said = one_line(exc)
    if not isinstance(exc, (duckdb.Error, OSError)) and " — " in said:
        return said  # a message of ours, that already says what to do
    cause = storage_cause(exc)
    if cause is not None:
        return _storage_line(cause)
    exc = root_cause(exc)
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"a file is not UTF-8 text ({exc.reason} at byte {exc.start}) — re-encode it as UTF-8"
        )
    if isinstance(exc, duckdb.Error):
        return f"the warehouse refused it: {one_line(exc)[:300]} — check the warehouse and inputs"
    if isinstance(exc, OSError):
        name = f" {exc.filename}" if exc.filename else ""
        if isinstance(exc, IsADirectoryError):
            return f"{exc.filename} is a directory — give a file path"
        if isinstance(exc, FileNotFoundError) and not exc.filename:
            return _with_hint(one_line(exc))
        return f"{exc.strerror or one_line(exc)}:{name} — check the path"
    return _with_hint(one_line(exc))


def _storage_line(cause: StorageCause) -> str:
    where = f" of {cause.file}" if cause.file else ""
    if cause.kind == "full":
        return f"no space left on the device{where} — free some space and run it again"
    if cause.kind == "read-only":
        return (
            f"the file system{where} is read-only — remount it read-write, or give a path on a "
            "writable disk"
        )
    name = f" {cause.file}" if cause.file else ""
    return f"permission denied:{name} — give a path you may write, or fix its permissions"


def _with_hint(message: str) -> str:
    return message if " — " in message else f"{message} — see --help"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    available = commands(named_command(argv))
    try:
        args = build_parser(available).parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    warehouse.LOCK_TIMEOUT_S = args.lock_timeout
    handler = {c.name: c.handler for c in available}[args.command]
    prog = f"prefixscope {args.command}"
    try:
        return handler(args)
    except (KeyboardInterrupt, duckdb.InterruptException):
        print(f"{prog}: interrupted — nothing more was written; run it again", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _template_errors() as exc:
        print(f"{prog}: error: chat template: {one_line(exc)} — fix the template", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # the reader of the output went away (``| head``): no error of the user's to report;
        # the status a shell gives a command its pipe's reader closed, and nothing more is
        # printed (Python would complain again when it flushes standard output at exit)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE
    except (duckdb.Error, OSError, ValueError) as exc:
        print(f"{prog}: error: {describe(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except ResourceError as exc:  # the machine ran out: not the user's input, not a bug
        print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_RESOURCE
    except RuntimeError as exc:
        if "interrupted" not in str(exc).lower():  # DuckDB's, when SIGINT lands in a query
            return _internal(prog, exc)
        print(f"{prog}: interrupted — nothing more was written; run it again", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        return _internal(prog, exc)


def _template_errors() -> tuple[type[Exception], ...]:
    """Jinja's error class when a chat template loaded jinja2, else none: a command that never
    imported it (an ingest of hashes) raised none, and need not wait for it to load."""
    jinja2 = sys.modules.get("jinja2")
    return () if jinja2 is None else (jinja2.TemplateError,)


def _internal(prog: str, exc: BaseException) -> int:
    """A bug: one line, exit 1."""
    what = f"{type(exc).__name__}: {one_line(exc)[:300]}"
    print(f"{prog}: internal error: {what} (please report)", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

"""``prefixscope ingest``: request logs into the warehouse."""

from __future__ import annotations

import argparse
from pathlib import Path

from prefixscope.cli import flags
from prefixscope.cli.command import Command
from prefixscope.ingest.formats import DEFAULT_START, DEFAULT_TENANT, FORMATS
from prefixscope.ingest.formats.arrival import DEFAULT_ARRIVAL
from prefixscope.ingest.formats.usage import LAYOUT_CHOICES
from prefixscope.terminal import More, clip

#: The format of KV events capture files (``capture-events``): events, not requests, so it is
#: read by its own stage (``stages/kv_events.py``) rather than through :data:`FORMATS`.
EVENTS_FORMAT = "vllm-events"

#: The formats whose prompts are text (``--move-to-end``).
TEXT_FORMATS = ("openai", "otlp")
#: Field-mapping flags (``--NAME-field PATH``) of the token and gateway-log formats; the tenant
#: field is read by every format.
FIELD_FLAGS = (
    "token",
    "timestamp",
    "tenant",
    "session",
    "request_id",
    "output_tokens",
    "request",
    "response",
)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", required=True, choices=sorted([*FORMATS, EVENTS_FORMAT]))
    p.add_argument(
        "--input", nargs="+", action="extend", required=True, metavar="FILE",
        help="plain or .gz; repeat it or list several (agent-json: also a folder, .tar.gz "
        "or .zip of conversations)",
    )  # fmt: skip
    flags.warehouse(p)
    p.add_argument(
        "--tenant",
        type=flags.tenant_name,
        default=DEFAULT_TENANT,
        help="tenant of every request (%(default)s)",
    )
    p.add_argument(
        "--block-size", type=flags.block_size, help="tokens per block (mooncake 512, others 16)"
    )
    p.add_argument(
        "--start",
        type=flags.timestamp,
        default=DEFAULT_START,
        help="instant that relative timestamps count from (default: the Unix epoch)",
    )
    p.add_argument("--tenant-from", choices=["type"], help="bailian: the tenant is the type")
    p.add_argument(
        "--full-blocks",
        action="store_true",
        help="mooncake: hash_ids name full blocks only and the last prompt token is always "
        "computed (a token source's rules; as `prefixscope export` writes gateway logs)",
    )
    p.add_argument(
        "--timestamp-unit",
        choices=["s", "ms", "us"],
        default="s",
        help="tokens, openai: unit of numeric timestamps (%(default)s)",
    )
    p.add_argument(
        "--salt-tenants",
        action="store_true",
        help="tokens, openai: a per-tenant salt in each first block (no sharing)",
    )
    p.add_argument(
        "--pseudonymize-tenants",
        metavar="KEY",
        help="store a keyed hash of each tenant name instead of the name",
    )
    flags.hash_key_file(p)
    p.add_argument("--chat-template", metavar="FILE", help="openai: Jinja chat template")
    p.add_argument("--tokenizer", metavar="FILE", help="openai: the model's tokenizer.json")
    p.add_argument(
        "--layout",
        choices=LAYOUT_CHOICES,
        default="auto",
        help="openai: whose usage the lines carry (auto: told apart line by line)",
    )
    p.add_argument(
        "--move-to-end",
        action="append",
        default=[],
        metavar="REGEX",
        help="openai, otlp: move what REGEX matches (a timestamp, a request id) to the end of the "
        "prompt before hashing: a what-if warehouse for `prefixscope compare` (repeatable)",
    )
    p.add_argument(
        "--arrival",
        default=DEFAULT_ARRIVAL,
        metavar="SPEC",
        help="agent-json: where conversations start: uniform:WINDOW (uniform:1h) or "
        "poisson:RATE (poisson:30/h) (%(default)s)",
    )
    p.add_argument(
        "--arrival-seed",
        type=flags.bounded_int(0),
        default=0,
        metavar="N",
        help="agent-json: the placement's random seed (%(default)s)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace a file's earlier rows even when lines accepted before would be rejected",
    )
    for name in FIELD_FLAGS:
        formats = "every format" if name == "tenant" else "tokens, openai"
        p.add_argument(
            f"--{name.replace('_', '-')}-field",
            dest=f"{name}_field",
            metavar="PATH",
            help=f'{formats}: where the {name.replace("_", " ")} is (a field path: a.b, a["b.c"])',
        )


def check_files(args: argparse.Namespace) -> None:
    """``--tokenizer`` and ``--chat-template`` are files this can load, checked before any work,
    each error naming the file."""
    for flag, path in (("--tokenizer", args.tokenizer), ("--chat-template", args.chat_template)):
        if path is not None and not Path(path).is_file():
            what = (
                "is a directory"
                if Path(path).is_dir()
                else "is not a regular file (a pipe or a device)"
                if Path(path).exists()
                else "does not exist"
            )
            raise ValueError(f"{flag} {path} {what} — give the path of a file")
    if args.tokenizer is not None:
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(args.tokenizer)
        except Exception as exc:  # tokenizers raises a bare Exception
            first = " ".join(str(exc).split())[:200]
            raise ValueError(
                f"--tokenizer {args.tokenizer} is not a tokenizer file ({first}) — give the "
                "model's tokenizer.json"
            ) from None
    if args.chat_template is not None:
        import jinja2

        try:
            text = Path(args.chat_template).read_text(encoding="utf-8")
            jinja2.Environment().parse(text)
        except UnicodeDecodeError:
            raise ValueError(
                f"--chat-template {args.chat_template} is not UTF-8 text — give a Jinja template"
            ) from None
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(
                f"--chat-template {args.chat_template} does not compile (line {exc.lineno}: "
                f"{exc.message}) — fix the template"
            ) from None


def ingest_command(args: argparse.Namespace) -> int:
    if args.format == EVENTS_FORMAT:
        return run_events(args)
    from prefixscope.ingest import IngestOptions
    from prefixscope.ingest.hashkey import resolve_key
    from prefixscope.ingest.staging import check_inputs
    from prefixscope.stages import ingest

    check_files(args)
    if args.full_blocks and args.format != "mooncake":
        raise ValueError("--full-blocks is for --format mooncake — leave it out")
    if args.format != "agent-json" and (args.arrival != DEFAULT_ARRIVAL or args.arrival_seed != 0):
        raise ValueError(
            "--arrival places conversations of --format agent-json — other formats carry "
            "their own times (--start shifts them)"
        )
    if args.move_to_end and args.format not in TEXT_FORMATS:
        raise ValueError(
            f"--move-to-end moves text, and --format {args.format} carries none — it is for "
            f"{' and '.join(TEXT_FORMATS)} logs"
        )
    # Before the warehouse is created or opened: a missing or unreadable input leaves no file
    # and no failed run behind.
    check_inputs(args.input, args.format)

    options = IngestOptions(
        tenant=args.tenant,
        block_size=args.block_size,
        start=args.start,
        tenant_from=args.tenant_from,
        salt_tenants=args.salt_tenants,
        timestamp_unit=args.timestamp_unit,
        fields=tuple(
            (name, getattr(args, f"{name}_field"))
            for name in FIELD_FLAGS
            if getattr(args, f"{name}_field") is not None  # an empty path is refused, not dropped
        ),
        chat_template=args.chat_template,
        tokenizer=args.tokenizer,
        layout=args.layout,
        pseudonymize_key=args.pseudonymize_tenants,
        replace=args.replace,
        full_blocks=args.full_blocks,
        move_to_end=tuple(args.move_to_end),
        arrival=args.arrival,
        arrival_seed=args.arrival_seed,
        hash_key=resolve_key(args.hash_key_file),
    )
    settings = ingest.IngestSettings(tuple(str(p) for p in args.input), args.format, options)
    result = ingest.ingest_logs(args.warehouse, settings)
    # an agent trace's row is a request (or a conversation that could not be read)
    unit = "requests" if args.format == "agent-json" else "lines"
    lines = []
    for f in result.files:
        note = " (replaced an earlier ingest of the same content)" if f.replaced else ""
        cut = "" if f.complete else " — the file ends early"
        counts = f"{f.lines:,} {unit}, {f.accepted:,} accepted, {f.rejected:,} rejected"
        line = f"{f.path}: {counts}{cut}{note}"
        if f.reasons:
            line += "\n  rejected: " + ", ".join(f"{r} {n:,}" for r, n in f.reasons)
        if f.out_of_order and args.format != "agent-json":  # conversations interleave
            line += (
                f"\n  {f.out_of_order:,} accepted requests arrive before an earlier line's (kept)"
            )
        lines.append(line)
    more = More.of_run(args.warehouse, "sources", result.run_id, column="ingest_run_id")
    for line in clip(lines, more, "files"):
        print(line)
    total = f"{result.lines:,} {unit} = {result.accepted:,} accepted + {result.rejected:,} rejected"
    print(f"total: {total}")
    if result.rejected:
        print(f"see the rejects table for reasons: {args.warehouse}")
    return 0


def run_events(args: argparse.Namespace) -> int:
    """``--format vllm-events``: capture files into ``kv_events`` (docs/ingest.md)."""
    from prefixscope.ingest.hashkey import resolve_key
    from prefixscope.stages import kv_events

    settings = kv_events.EventIngestSettings(
        tuple(args.input), args.block_size, hash_key=resolve_key(args.hash_key_file)
    )
    results = kv_events.ingest_events(args.warehouse, settings)
    for r in results:
        cut = "" if r.complete else " — the file ends early (its whole frames were kept)"
        note = " (replaced an earlier ingest of the same file)" if r.replaced else ""
        print(
            f"{r.path}: {r.frames:,} batches, {r.lines:,} events, {r.accepted:,} accepted, "
            f"{r.rejected:,} rejected{cut}{note}"
        )
        if r.reasons:
            print("  rejected: " + ", ".join(f"{k} {n:,}" for k, n in r.reasons))
        if r.unlinked:
            print(
                f"  {r.unlinked:,} stored blocks without a prefixscope id (chains begun "
                "before the capture)"
            )
    if any(r.rejected for r in results):
        print(f"see the rejects table for reasons: {args.warehouse}")
    return 0


COMMAND = Command("ingest", "read request logs into the requests table", arguments, ingest_command)

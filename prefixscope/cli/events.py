"""``prefixscope capture-events``: a vLLM KV events publisher's batches into a capture file."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from prefixscope.cli import flags
from prefixscope.cli.command import Command


def endpoint(text: str) -> str:
    from prefixscope.ingest.kvevents.capture import check_endpoint

    try:
        return check_endpoint(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def topic(text: str) -> str:
    from prefixscope.ingest.kvevents.capture import MAX_TOPIC_BYTES

    text = flags.utf8_text(text)
    if len(text.encode()) > MAX_TOPIC_BYTES:
        raise argparse.ArgumentTypeError(f"a topic is at most {MAX_TOPIC_BYTES:,} bytes")
    return text


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--endpoint",
        type=endpoint,
        action="append",
        required=True,
        metavar="tcp://HOST:PORT",
        help="the publisher's address (vLLM's --kv-events-config endpoint, with the engine's "
        "host); once per data-parallel rank (rank r publishes on port + r)",
    )
    p.add_argument(
        "--snapshot-endpoint",
        type=endpoint,
        action="append",
        default=[],
        metavar="tcp://HOST:PORT",
        help="also ask each publisher for its snapshot first, the engine's whole cache (vLLM's "
        "--kv-events-config snapshot_endpoint); once per --endpoint, in the same order",
    )
    p.add_argument(
        "--out",
        type=flags.out_file,
        required=True,
        metavar="FILE",
        help="the capture file (appended to when it is one already)",
    )
    p.add_argument(
        "--duration",
        type=flags.duration,
        metavar="S",
        help="stop after this long (30s, 5m, 1h; default: at Ctrl-C)",
    )
    p.add_argument(
        "--topic",
        default="",
        type=topic,
        help="the publisher's topic (its config's; empty)",
    )


def events_command(args: argparse.Namespace) -> int:
    from prefixscope.ingest.kvevents.capture import capture_events, same_publisher

    out = Path(args.out)
    twice = same_publisher(args.endpoint)
    if twice is not None:
        raise ValueError(
            f"--endpoint {twice[0]} and {twice[1]} reach one publisher: every batch would be "
            "captured twice — give each publisher once"
        )
    # SIGTERM (a service manager's stop) ends the capture as Ctrl-C does: summary, exit 0.
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"capturing from {', '.join(args.endpoint)} into {out}; Ctrl-C stops", flush=True)
    try:
        summary = capture_events(
            args.endpoint,
            out,
            duration=args.duration,
            topic=args.topic,
            stop=stop,
            notice=lambda line: print(line, file=sys.stderr, flush=True),
            snapshot_endpoints=args.snapshot_endpoint,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if summary.stopped_by == "stop":
        summary.stopped_by = "SIGTERM"
    print(summary.line(out))
    return 0


COMMAND = Command(
    "capture-events",
    "record a vLLM KV events publisher's batches into a file (for ingest --format vllm-events)",
    arguments,
    events_command,
)

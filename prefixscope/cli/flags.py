"""Flags and value types shared by several commands, each defined once."""

from __future__ import annotations

import argparse
from datetime import datetime

from prefixscope.analysis.simulation.capacities import Capacities

DEFAULT_WAREHOUSE = "prefixscope.duckdb"


def int_list(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        value = float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"expected a duration like 30s, 5m, 1h: {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give a time zone, e.g. {text}Z for UTC")
    return value


def warehouse(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warehouse", default=DEFAULT_WAREHOUSE, help="DuckDB file (%(default)s)")


def windows(p: argparse.ArgumentParser, default: list[str] | None = None) -> None:
    p.add_argument(
        "--window",
        type=name_list,
        default=default,
        help="all, last-half, steady (comma-separated)",
    )


def model(p: argparse.ArgumentParser, default: str | None = None, what: str = "") -> None:
    """``--model`` (a catalog name), ``--model-config`` (a config.json) and ``--kv-dtype``."""
    p.add_argument("--model", default=default, help=f"catalog model{what} (e.g. llama-3-8b)")
    p.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json")
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])


def capacities(p: argparse.ArgumentParser, blocks_help: str | None = None) -> None:
    """One of ``--capacity-blocks``, ``--capacity-tokens``, ``--capacity-gib`` (of ``--model``),
    each a comma-separated list."""
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--capacity-blocks", type=int_list, metavar="N[,N...]", help=blocks_help)
    cap.add_argument("--capacity-tokens", type=int_list, metavar="N[,N...]")
    cap.add_argument(
        "--capacity-gib",
        type=float_list,
        metavar="X[,X...]",
        help="KV cache GiB of --model or --model-config",
    )
    model(p, what=" for --capacity-gib")


def capacities_of(args: argparse.Namespace) -> Capacities:
    return Capacities(
        blocks=args.capacity_blocks,
        tokens=args.capacity_tokens,
        gib=args.capacity_gib,
        model=args.model,
        model_config=args.model_config,
        kv_dtype=args.kv_dtype,
    )

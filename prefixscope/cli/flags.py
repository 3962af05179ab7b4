"""Flags and value types shared by several commands, each defined once."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.tenants import check_tenant

DEFAULT_WAREHOUSE = "prefixscope.duckdb"

#: The largest value any integer flag takes (int64: what the warehouse's BIGINT columns hold).
INT64_MAX = 2**63 - 1
#: The largest block size accepted (tokens per block): far above any engine's (16 to 512).
MAX_BLOCK_SIZE = 1_048_576
#: The largest --capacity-gib accepted: 1 PiB of KV cache.
MAX_GIB = 2.0**20


def _int(text: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def bounded_int(low: int = 1, high: int = INT64_MAX) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low:,} to {high:,}, got {text!r}"
            )
        return value

    return parse


positive_int = bounded_int(1)
count = bounded_int(0)
block_size = bounded_int(1, MAX_BLOCK_SIZE)


def finite_float(low: float = 0.0, high: float = math.inf, *, strict: bool = True):  # noqa: ANN201
    """An argparse type: a finite number above ``low`` (or at it, when not ``strict``) and at
    most ``high``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        below = value <= low if strict else value < low
        if not math.isfinite(value) or below or value > high:
            raise argparse.ArgumentTypeError(
                f"expected a finite number {'above' if strict else 'from'} {low:g}"
                + (f" and at most {high:g}" if math.isfinite(high) else "")
                + f", got {text!r}"
            )
        return value

    return parse


def int_list(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    if any(v > INT64_MAX for v in values):
        raise argparse.ArgumentTypeError(f"expected integers below 2^63, got {text!r}")
    return values


def float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or any(not math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers, got {text!r}")
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    if any(v > MAX_GIB for v in values):
        raise argparse.ArgumentTypeError(f"expected at most {MAX_GIB:,.0f} each, got {text!r}")
    return values


def out_file(text: str) -> str:
    """An output file path: not an existing directory."""
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a directory — give a file path, e.g. {Path(text) / 'report.html'}"
        )
    return text


def duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        value = float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"expected a duration like 30s, 5m, 1h: {text!r}"
        ) from None
    if not math.isfinite(value) or value > 10 * 365 * 86_400:
        raise argparse.ArgumentTypeError(
            f"a duration must be finite and at most 10 years: {text!r}"
        )
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def tenant_name(text: str) -> str:
    """A tenant's name, by the rule of ``prefixscope.tenants`` (never the fleet's marker)."""
    try:
        return check_tenant(text, "the name")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def tenant_list(text: str) -> list[str]:
    """Comma-separated tenant names, each by the rule, none twice."""
    names = [v.strip() for v in text.split(",")]
    for name in names:
        tenant_name(name)
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise argparse.ArgumentTypeError(f"a tenant is named twice: {', '.join(twice)}")
    return names


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

"""Flags and value types shared by several commands, each defined once."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.ingest.formats.base import MAX_BLOCK_SIZE
from prefixscope.pipelines.flow_parameters import DEFAULT_WAREHOUSE
from prefixscope.tenants import check_tenant

if TYPE_CHECKING:
    from prefixscope.analysis.cost.prices import Prices

#: The largest value any integer flag takes (int64: what the warehouse's BIGINT columns hold).
INT64_MAX = 2**63 - 1
#: The largest --capacity-gib accepted: 1 PiB of KV cache.
MAX_GIB = 2.0**20
#: The largest --load-scale: a thousand times the logged traffic.
MAX_LOAD_SCALE = 1_000.0


#: An integer as a person types it: ASCII digits, an optional sign, ``_`` only between digits
#: (``1_000``). Nothing else that ``int()`` would take: no other scripts' digits, no spaces
#: inside, no ``0x``.
_INT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")
#: A decimal number, the same way: no ``nan``, ``inf`` or hexadecimal; bounds are checked after.
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:_[0-9]+)*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def utf8_text(text: str) -> str:
    """A flag's text that is data, not a path: it must be UTF-8 (an argument that is not comes
    in with surrogate escapes, which no encoder takes later)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text)[:40].decode("utf-8", "backslashreplace")
        raise argparse.ArgumentTypeError(f"{shown} is not UTF-8 text") from None
    return text


def _int(text: str) -> int:
    word = text.strip()
    if not _INT.fullmatch(word) or len(word) > 40:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(word)


def number(text: str) -> float:
    """A finite decimal number (ValueError otherwise); its bounds are the caller's."""
    word = text.strip()
    if not _FLOAT.fullmatch(word) or len(word) > 40:
        raise ValueError(f"expected a decimal number, got {text!r}")
    value = float(word)
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {text!r}")
    return value


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
            value = number(text)
        except ValueError:
            value = math.nan
        below = value <= low if strict else value < low
        if not math.isfinite(value) or below or value > high:
            raise argparse.ArgumentTypeError(
                f"expected a finite number {'above' if strict else 'from'} {low:g}"
                + (f" and at most {high:g}" if math.isfinite(high) else "")
                + f", got {text!r}"
            )
        return value

    return parse


def distinct(values: list, text: str, key: Callable = lambda v: v) -> list:  # type: ignore[type-arg]
    """``values`` when no two are the same (by ``key``); a value given twice would run, and
    write, every row of it twice."""
    seen: dict[object, object] = {}
    for value in values:
        if key(value) in seen:
            first = seen[key(value)]
            if first != value:
                raise argparse.ArgumentTypeError(
                    f"{first!r} and {value!r} in {text!r} print alike ({key(value)}), so every "
                    "table would show one value twice — give values apart in their first six "
                    "digits"
                )
            raise argparse.ArgumentTypeError(
                f"{value!r} is given twice in {text!r} — give each value once"
            )
        seen[key(value)] = value
    return values


def _items(text: str) -> list[str]:
    items = [v.strip() for v in text.split(",")]
    if not any(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return [v for v in items if v]


def ints(low: int = 1, high: int = INT64_MAX) -> Callable[[str], list[int]]:
    """An argparse type: distinct comma-separated integers, each in [low, high]."""

    def parse(text: str) -> list[int]:
        try:
            values = [_int(v) for v in _items(text)]
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated integers, got {text!r}"
            ) from None
        if any(not low <= v <= high for v in values):
            raise argparse.ArgumentTypeError(
                f"expected integers from {low:,} to {high:,}, got {text!r}"
            )
        return distinct(values, text)

    return parse


def floats(
    high: float,
    low: float = 0.0,
    key: Callable[[float], object] = lambda v: v,
    *,
    strict: bool = True,
) -> Callable[[str], list[float]]:
    """An argparse type: distinct comma-separated finite numbers above ``low`` (or at it, when
    not ``strict``), at most ``high``; distinct by ``key`` (two that print alike would be one
    row to a reader)."""

    def parse(text: str) -> list[float]:
        try:
            values = [number(v) for v in _items(text)]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated finite numbers, got {text!r}"
            ) from None
        if any(not (low < v if strict else low <= v) or v > high for v in values):
            raise argparse.ArgumentTypeError(
                f"expected numbers {'above' if strict else 'from'} {low:g} and at most "
                f"{high:,g}, got {text!r}"
            )
        return distinct(values, text, key)

    return parse


#: Capacities in blocks or tokens, replica counts: positive, below 2^63.
int_list = ints(1, INT64_MAX)
#: Block sizes, as ``--block-size`` takes one.
block_size_list = ints(1, MAX_BLOCK_SIZE)
#: GiB of KV cache, up to ``MAX_GIB``.
float_list = floats(MAX_GIB)
#: The slowest load scale: a millionth of the logged traffic (a week's trace then spans two
#: millennia; far below it, arrival times lose their sub-second differences in a double).
MIN_LOAD_SCALE = 1e-6
#: Load scales: up to ``MAX_LOAD_SCALE`` times the logged traffic; two that agree to six
#: digits (``1`` and ``1.00000001``) print as one load in every table and answer.
load_scales = floats(MAX_LOAD_SCALE, MIN_LOAD_SCALE, key=lambda v: f"{v:.6g}")

#: The longest router delay, ms (about 30 years: longer is a view that never arrives).
MAX_ROUTER_DELAY_MS = 1e12


#: ``--router-delay``: distinct milliseconds, 0 (a fresh view) or more.
router_delays = floats(MAX_ROUTER_DELAY_MS, key=lambda v: f"{v:.6g}", strict=False)


def add_warm_start(p: argparse.ArgumentParser) -> None:
    """``--warm-start cold|events|first-window:SECONDS`` (``trace/warm.py``)."""
    from prefixscope.analysis.trace.warm import parse_warm_start

    def parse(text: str):  # noqa: ANN202
        try:
            return parse_warm_start(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    p.add_argument(
        "--warm-start",
        type=parse,
        metavar="cold|events|first-window:SECONDS",
        help="start the caches warm, replayed then never measured: as the captured KV events "
        "(ingest --format vllm-events) left the engine at the trace's first arrival, or after "
        "the trace's own first SECONDS (cold: empty, the default)",
    )


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
        value = number(text[:-1]) * units[text[-1]] if text[-1] in units else number(text)
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


def slo_window(text: str) -> float:
    """``--slo-window``: seconds, or ``all`` (``analysis/plan/windows.py``)."""
    from prefixscope.analysis.plan.windows import parse_window

    try:
        return parse_window(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(" — ")[0]) from None


def name_list(text: str) -> list[str]:
    """Distinct comma-separated names (of policies, routers, windows, isolations: compared
    without regard to case)."""
    return distinct(_items(text), text, str.casefold)


def engine_list(text: str) -> list[str]:
    """Distinct engines of the fleet's registry, refused by name before any capacity is
    resolved."""
    from prefixscope.analysis.fleet.engines import ENGINES  # only the fleet's commands need it

    names = name_list(text)
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown engine {unknown[0]!r}; known: {', '.join(ENGINES)}"
        )
    return names


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


def warehouse(p: argparse.ArgumentParser, dest: str = "warehouse") -> None:
    p.add_argument(
        "--warehouse",
        dest=dest,
        default=DEFAULT_WAREHOUSE,
        metavar="WAREHOUSE",
        help="DuckDB file (%(default)s)",
    )


def windows(
    p: argparse.ArgumentParser, default: list[str] | None = None, dest: str = "window"
) -> None:
    p.add_argument(
        "--window",
        dest=dest,
        type=name_list,
        metavar="WINDOW",
        default=default,
        help="all, last-half, steady (comma-separated)",
    )


def cost_model(p: argparse.ArgumentParser, what: str = "prefill times") -> None:
    """``--cost-model``: what prices ``what`` (``analysis/cost/choice.py``)."""
    from prefixscope.analysis.cost.choice import COST_MODEL_KINDS

    p.add_argument(
        "--cost-model",
        default="auto",
        choices=COST_MODEL_KINDS,
        help=f"{what}: a calibrated model where the warehouse holds one (auto), else the "
        "measured kernels where they cover the model and GPU, else the roofline (a lower bound)",
    )


def model(p: argparse.ArgumentParser, default: str | None = None, what: str = "") -> None:
    """``--model`` (a catalog name), ``--model-config`` (a config.json) and ``--kv-dtype``."""
    p.add_argument("--model", default=default, help=f"catalog model{what} (e.g. llama-3-8b)")
    p.add_argument(
        "--model-config", type=model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])


def model_named(args: argparse.Namespace, default: str) -> str:
    """The model's name: ``--model``, else the name ``--model-config``'s shape takes, else
    ``default`` (a config.json is never named after the default catalog model)."""
    if args.model:
        return str(args.model)
    if getattr(args, "model_config", None):
        from prefixscope.analysis.cost.models import resolve_model

        return resolve_model(None, args.model_config).name
    return default


def model_shape(args: argparse.Namespace, default: str):  # type: ignore[no-untyped-def]
    """The shape ``--model-config`` or ``--model`` gives, else ``default``'s; a config.json is
    named by ``--model`` or by itself, never after ``default``."""
    from prefixscope.analysis.cost.models import resolve_model

    name = args.model or (None if getattr(args, "model_config", None) else default)
    return resolve_model(name, getattr(args, "model_config", None))


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


def model_config(text: str) -> str:
    """A Hugging Face config.json, read and checked key by key here (``ModelShape``), so that
    a bad one stops every command that takes it before any work; kept as given."""
    from prefixscope.analysis.cost.models import ModelShape

    return _read_with(text, ModelShape.from_hf_config)


def _read_with(text: str, read: Callable[[str], object]) -> str:
    """``text`` when ``read`` takes the file it names (``prefixscope/textfile.py`` reads it,
    so a file that cannot be opened is a ValueError too); else the flag's one-line error."""
    try:
        read(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def dask_address(text: str) -> str:
    """``[SCHEME://]HOST:PORT`` (tcp:// when no scheme is given), checked here; the command
    connects to it before any work, within ``fanout.CONNECT_TIMEOUT_S``."""
    from prefixscope.analysis.fanout import check_address

    try:
        return check_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def hash_key_file(p: argparse.ArgumentParser) -> None:
    """``--hash-key-file FILE|none``: the key every stored block hash is keyed with
    (``ingest/hashkey.py``); without it the user's own, made on first use."""
    p.add_argument(
        "--hash-key-file",
        type=_key_file,
        metavar="FILE|none",
        help="the key (16-64 bytes, or their hex) every stored block hash is keyed with, so that "
        "no guessed prompt can be confirmed against the warehouse (default: your key in "
        "~/.config/prefixscope/hash.key, made on first use); none: plain hashes",
    )


def _key_file(text: str) -> str:
    """``none``, or a key file read and checked here (its key is read again when used)."""
    from prefixscope.ingest.hashkey import PLAIN, read_key

    if text.strip().lower() == PLAIN:
        return PLAIN
    try:
        read_key(Path(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def prices(p: argparse.ArgumentParser) -> None:
    """``--prices FILE``: what a GPU-hour, a GB-hour of DRAM tier and of a shared store cost
    (``analysis/cost/prices.py``), the one file ``plan``, ``fleet`` and ``savings`` read."""
    p.add_argument(
        "--prices",
        type=prices_file,
        metavar="FILE",
        help="a TOML file: gpu_hour, dram_gb_hour, store_gb_hour ($ per hour; default: each "
        "GPU's catalog price, $0.005 per GB-hour of DRAM, $0.002 of a store)",
    )


def prices_file(text: str) -> Prices:
    """A TOML file of prices, read and checked key by key here (``analysis/cost/prices.py``):
    the settings take the prices it gave, and read nothing again."""
    from prefixscope.analysis.cost.prices import load_prices

    try:
        return load_prices(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None

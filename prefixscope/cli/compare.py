"""``prefixscope compare``: a warehouse before a what-if beside one after it (the same logs
ingested with ``--move-to-end``, or any two warehouses simulated alike), per tenant."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from prefixscope.cli.command import Command
from prefixscope.terminal import More, clip

if TYPE_CHECKING:
    from prefixscope.stages.compare import Comparison

#: The hit-rate window shown unless ``--window`` names another.
DEFAULT_WINDOW = "all"
#: What shows the rows past a terminal's (in either warehouse).
ALL_HIT_RATES = "SELECT * FROM latest_hit_rates"
ALL_SAVINGS = "SELECT * FROM latest_savings"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--before", required=True, metavar="WAREHOUSE", help="the warehouse as logged")
    p.add_argument(
        "--after", required=True, metavar="WAREHOUSE", help="the warehouse of the what-if"
    )
    p.add_argument(
        "--window",
        default=DEFAULT_WINDOW,
        metavar="WINDOW",
        help="the hit rates' measure window (%(default)s; 'steady' where simulated)",
    )


def compare_command(args: argparse.Namespace) -> int:
    from prefixscope.stages.compare import compare_warehouses

    result = compare_warehouses(args.before, args.after)
    print(format_comparison(result, args.window, args.before, args.after))
    return 0


def _capacity(blocks: int) -> str:
    return "unbounded" if blocks < 0 else f"{blocks:,}"


def format_comparison(result: Comparison, window: str, before: str, after: str) -> str:
    """Per tenant and configuration: the token hit rate before → after (its change in points)
    beside the ceiling's; then, where both warehouses priced it, prefill GPU-seconds and TTFT
    with the cache."""
    hits = [r for r in result.hit_rates.iter_rows(named=True) if r["measure_window"] == window]
    lines = [f"hit rates, window {window} (before: {before}; after: {after}):"]
    rows = []
    for r in hits:
        b, a = r["token_hit_rate_before"], r["token_hit_rate_after"]
        cb, ca = r["ceiling_token_hit_rate_before"], r["ceiling_token_hit_rate_after"]
        options = f" {r['policy_options']}" if r["policy_options"] else ""
        rows.append(
            f"  {r['tenant']:<12} {r['policy']}{options} {r['isolation']} @ "
            f"{_capacity(r['capacity_blocks'])}: {b:.2%} → {a:.2%} ({(a - b) * 100:+.2f} pt); "
            f"ceiling {cb:.2%} → {ca:.2%}"
        )
    if not rows:
        windows = sorted({r["measure_window"] for r in result.hit_rates.iter_rows(named=True)})
        shown = ", ".join(windows) or "none"
        rows.append(f"  no configuration both simulated in window {window} (windows: {shown})")
    lines += clip(rows, More(warehouse=after, sql=ALL_HIT_RATES), "configurations")
    if result.savings.height:
        lines.append("with the cache: prefill GPU-seconds over the trace, TTFT:")
        saved = []
        for r in result.savings.iter_rows(named=True):
            where = r["deployment"] or r["gpu"]
            saved.append(
                f"  {r['tenant']:<12} {r['policy']} {r['isolation']} @ "
                f"{_capacity(r['capacity_blocks'])}, {r['model']} on {where} ({r['cost_model']}): "
                f"{r['prefill_gpu_seconds_with_cache_before']:,.1f} → "
                f"{r['prefill_gpu_seconds_with_cache_after']:,.1f} GPU-s; TTFT p50 "
                f"{r['ttft_p50_with_cache_s_before'] * 1e3:,.0f} → "
                f"{r['ttft_p50_with_cache_s_after'] * 1e3:,.0f} ms, p95 "
                f"{r['ttft_p95_with_cache_s_before'] * 1e3:,.0f} → "
                f"{r['ttft_p95_with_cache_s_after'] * 1e3:,.0f} ms"
            )
        lines += clip(saved, More(warehouse=after, sql=ALL_SAVINGS), "rows")
    else:
        lines.append("what the cache saves: not priced in both (run `prefixscope savings` on each)")
    unmatched = result.unmatched_hit_rates + result.unmatched_savings
    if unmatched:
        lines.append(f"({unmatched:,} configurations only one warehouse holds are left out)")
    return "\n".join(lines)


COMMAND = Command(
    "compare",
    "a warehouse before a what-if beside one after it: hit rates, GPU-seconds, TTFT",
    arguments,
    compare_command,
)

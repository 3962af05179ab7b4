"""``prefixscope validate``: the simulator beside the engines' reported cached tokens, and the
effective capacity that explains them (the ``validation`` tables)."""

from __future__ import annotations

import argparse

from prefixscope.analysis.validate.tables import fit_policies
from prefixscope.cli import flags
from prefixscope.cli.command import Command

#: Disagreeing requests printed (all ``--top`` are written to the warehouse).
PRINTED = 10


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--policy",
        default="lru",
        choices=list(fit_policies()),
        help="the cache that explains the reports: lru exactly at every capacity, the others "
        "at a refined grid (lru)",
    )
    p.add_argument(
        "--engine-block-size",
        type=flags.block_size,
        metavar="TOKENS",
        help="the engines' KV block size (default: the common divisor of the reported counts)",
    )
    p.add_argument(
        "--top",
        type=flags.bounded_int(0, 100_000),
        default=20,
        metavar="N",
        help="the disagreeing requests kept (20)",
    )
    p.add_argument(
        "--resamples",
        type=flags.bounded_int(0, 10_000),
        default=200,
        metavar="N",
        help="bootstrap resamples of the capacity's range (200; 0: the best fit only)",
    )
    p.add_argument("--seed", type=flags.count, default=0, help="the bootstrap's seed (0)")
    flags.model(p, what=" for the capacity in GiB")
    events = p.add_argument_group("KV events (--events: the pool beside the engine's events)")
    events.add_argument(
        "--events",
        action="store_true",
        help="compare a simulated block pool with the engine's KV cache events (kv_events) "
        "instead of the reported counts",
    )
    events.add_argument(
        "--pool-model", default="vllm", choices=["vllm", "lru"], help="the pool model (vllm)"
    )
    events.add_argument(
        "--event-windows",
        type=flags.bounded_int(1, 10_000),
        default=20,
        metavar="N",
        help="time windows over the events' span (20)",
    )
    events.add_argument(
        "--capacity-blocks",
        type=flags.ints(1),
        default=[],
        metavar="N,...",
        help="the pool sizes to scan (default: a grid from the engine's peak)",
    )
    events.add_argument(
        "--tpot-ms",
        type=flags.finite_float(0.0, 60_000.0, strict=False),
        default=20.0,
        help="service-time model: milliseconds per output token (20)",
    )
    events.add_argument(
        "--prefill-tokens-per-s",
        type=flags.finite_float(1.0, 1e9),
        default=10_000.0,
        help="service-time model: uncached prompt tokens per second (10000)",
    )


def validate_command(args: argparse.Namespace) -> int:
    if args.events:
        return run_events(args)
    from prefixscope.dashboards.validation import summary_text
    from prefixscope.stages import validate
    from prefixscope.terminal import More

    result = validate.validate_capacity(
        args.warehouse,
        validate.ValidateSettings(
            policy=args.policy,
            engine_block_size=args.engine_block_size,
            top=args.top,
            resamples=args.resamples,
            seed=args.seed,
            model=args.model,
            model_config=args.model_config,
            kv_dtype=args.kv_dtype,
        ),
    )
    more = More.of_latest(args.warehouse, "validation", "validate")
    print(
        summary_text(result.agreement.to_pylist(), result.disagreements.to_pylist()[:PRINTED], more)
    )
    return 0


def run_events(args: argparse.Namespace) -> int:
    from prefixscope.stages import validate_events as stage

    settings = stage.EventValidateSettings(
        model=args.pool_model,
        windows=args.event_windows,
        capacities=tuple(args.capacity_blocks),
        tpot_ms=args.tpot_ms,
        prefill_tokens_per_s=args.prefill_tokens_per_s,
    )
    for line in event_summary(
        stage.validate_against_events(args.warehouse, settings), settings.model
    ):
        print(line)
    return 0


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def event_summary(results: list, model: str) -> list[str]:  # type: ignore[type-arg]
    """Per rank: the effective capacity and the agreement there."""
    lines = []
    for r in results:
        b = r.best
        tau = "n/a" if b.kendall_tau is None else f"{b.kendall_tau:.3f}"
        lines.append(
            f"rank {r.rank}: effective capacity {b.capacity:,} blocks ({model} pool, "
            f"{len(r.scanned)} capacities scanned, engine peak {r.peak:,} held, "
            f"{r.requests:,} requests)"
        )
        lines.append(
            f"  held: {_pct(b.engine_held_share)} of the engine's blocks in the pool, "
            f"{_pct(b.sim_held_share)} of the pool's in the engine (jaccard {b.jaccard:.3f}, "
            f"{b.windows} windows)"
        )
        lines.append(
            f"  evictions: {_pct(b.removal_match_share)} of {b.engine_removals:,} engine "
            f"removals matched, Kendall tau {tau}; {b.waited:,} requests waited for blocks"
            + (f"; {r.unlinked:,} engine rows without a prefixscope id" if r.unlinked else "")
        )
    return lines


COMMAND = Command(
    "validate",
    "compare simulated hits with the engines' reported cached tokens; the effective capacity",
    arguments,
    validate_command,
)

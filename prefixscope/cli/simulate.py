"""``prefixscope simulate``: replay the requests through simulated prefix caches."""

from __future__ import annotations

import argparse

from prefixscope.analysis.policies import POLICIES
from prefixscope.cli import flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument("--policy", type=flags.name_list, required=True, help=", ".join(POLICIES))
    flags.capacities(p)
    flags.windows(p, ["all"])
    p.add_argument(
        "--isolation",
        type=flags.name_list,
        default=["shared"],
        help="shared, salted, partitioned (comma-separated)",
    )
    p.add_argument("--quota-file", metavar="FILE", help="partitioned: tenant,share lines")
    p.add_argument(
        "--ttl", type=flags.finite_float(), metavar="SECONDS", help="ttl: idle time before a drop"
    )
    p.add_argument("--pin", metavar="FILE", help="pinned: prefix hashes to keep")
    p.add_argument(
        "--pin-top", type=flags.positive_int, metavar="K", help="pinned: the K most shared prefixes"
    )
    p.add_argument(
        "--bucket",
        type=flags.duration,
        default=300.0,
        metavar="DURATION",
        help="time bucket of hit_rate_timeseries, e.g. 5m, 30s, 1h (5m)",
    )
    p.add_argument(
        "--block-size",
        type=flags.block_size_list,
        metavar="N[,N...]",
        help="also simulate at these block sizes, whole multiples of the warehouse's (16 -> 32, "
        "64; 512 -> 1024); capacities keep their tokens. A finer size: ingest a token source "
        "again with --block-size; a hash-id trace (mooncake, bailian) cannot be made finer",
    )
    p.add_argument(
        "--outcomes",
        action="store_true",
        help="also write request_outcomes for every configuration",
    )
    p.add_argument(
        "--gap-bounds",
        type=flags.floats(30 * 86_400.0),
        metavar="S[,S...]",
        help="misses_by_gap: where to cut the gap before a request within its session, in "
        "seconds, increasing (10,60,300)",
    )
    p.add_argument(
        "--vllm-blocks",
        action="store_true",
        help="count blocks as vLLM does: a hash-id trace's partial last block never cached, "
        "and a prompt's last token always computed (fleet --engine vllm always does)",
    )
    flags.add_warm_start(p)


def simulate_command(args: argparse.Namespace) -> int:
    from prefixscope.analysis.simulation.scenarios import Settings
    from prefixscope.dashboards.text import format_hit_rates, format_warm_start
    from prefixscope.stages import simulate
    from prefixscope.terminal import More

    settings = simulate.SimulateSettings(
        policies=tuple(args.policy),
        capacities=flags.capacities_of(args),
        isolations=tuple(args.isolation),
        measure=Settings(
            windows=tuple(args.window),
            ttl_s=args.ttl,
            pin_file=args.pin,
            pin_top=args.pin_top,
            quota_file=args.quota_file,
            bucket_s=args.bucket,
            outcomes=args.outcomes,
        ),
        block_sizes=tuple(args.block_size) if args.block_size else None,
        vllm_blocks=args.vllm_blocks,
        **({"gap_bounds": tuple(args.gap_bounds)} if args.gap_bounds else {}),
        **({"warm_start": args.warm_start} if args.warm_start else {}),
    )
    result = simulate.simulate_policies(args.warehouse, settings)
    more = More.of_run(args.warehouse, "hit_rates", result.run_id)
    hit_rates = result.tables.arrow()[0]
    print(format_warm_start(hit_rates) + format_hit_rates(hit_rates, more))
    if result.tables.misses_by_gap:
        import polars as pl
        import pyarrow as pa

        from prefixscope.dashboards.agents import gap_lines
        from prefixscope.terminal import clip

        gaps = pa.concat_tables(result.tables.misses_by_gap)
        lines = gap_lines(pl.from_arrow(gaps))
        print("\n".join(clip(lines, More.of_run(args.warehouse, "misses_by_gap", result.run_id))))
    return 0


COMMAND = Command(
    "simulate", "replay requests through a simulated prefix cache", arguments, simulate_command
)

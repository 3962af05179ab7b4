"""``prefixscope plan``: what capacity, and what fleet, reach a target share of the ceiling."""

from __future__ import annotations

import argparse

from prefixscope.cli import flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--target",
        type=flags.finite_float(0.0, 1.0),
        default=0.9,
        metavar="SHARE",
        help="the share of the ceiling to reach (0.9)",
    )
    p.add_argument("--window", default="all", choices=["all", "last-half"])
    p.add_argument("--model", help="KV bytes and miss cost (llama-3-8b)")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    p.add_argument(
        "--gpu", type=flags.gpu, default="h100", help="h100, h200, a100 or NAME:TFLOPS:TBPS (h100)"
    )
    p.add_argument("--cost-model", default="auto", choices=["auto", "calibrated", "roofline"])
    p.add_argument(
        "--prices",
        type=flags.prices_file,
        metavar="FILE",
        help="a TOML file: gpu_hour, dram_gb_hour, store_gb_hour ($ per hour)",
    )
    p.add_argument(
        "--load-scale",
        type=flags.finite_float(0.0, flags.MAX_LOAD_SCALE),
        default=1.0,
        metavar="S",
        help="choose among fleet runs at this load scale (1)",
    )


def run(args: argparse.Namespace) -> int:
    from prefixscope.dashboards.plan import answer_text
    from prefixscope.stages import plan
    from prefixscope.terminal import More

    table = plan.run(
        args.warehouse,
        plan.PlanSettings(
            target=args.target,
            window=args.window,
            model=flags.model_named(args, "llama-3-8b"),
            model_config=args.model_config,
            gpu=args.gpu,
            kv_dtype=args.kv_dtype,
            cost_model=args.cost_model,
            prices=args.prices,
            load_scale=args.load_scale,
        ),
    )
    print(answer_text(table.to_pylist(), more=More.of_latest(args.warehouse, "plan", "plan")))
    return 0


COMMAND = Command("plan", "the capacity and fleet that reach a target hit rate", arguments, run)

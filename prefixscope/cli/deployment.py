"""``deployment``: what each GPU of a replica holds, weights, reserve and KV pool."""

from __future__ import annotations

import argparse

from prefixscope.analysis.cost.savings import DEFAULT_MODEL
from prefixscope.cli import flags
from prefixscope.cli.command import Command


def _deployments(text: str) -> list[str]:
    """Comma-separated deployments, each read here (``GPUxTP``), kept as given."""
    from prefixscope.analysis.cost.deployment import parse_deployment

    names = [t.strip() for t in text.split(",")]
    try:
        for name in names:
            parse_deployment(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return names


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help=f"catalog model ({DEFAULT_MODEL})")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument(
        "--deployment",
        type=_deployments,
        required=True,
        metavar="GPUxTP[,…]",
        help="e.g. h100x1,h200x8 (a GPU name or a .toml file, then x and the TP)",
    )
    p.add_argument("--block-size", type=flags.bounded_int(1, 2**20), default=16, metavar="N")
    p.add_argument(
        "--gpu-memory-utilization",
        type=flags.finite_float(0.0, 1.0),
        default=0.9,
        metavar="F",
        help="share of HBM the engine may use (%(default)s, vLLM's default)",
    )
    p.add_argument(
        "--budget-tokens",
        type=flags.bounded_int(1, 2**24),
        default=8192,
        metavar="N",
        help="tokens of the profiled step, max_num_batched_tokens (%(default)s)",
    )
    p.add_argument(
        "--weight-dtype",
        choices=("bf16", "fp16", "fp8", "int4", "mxfp4"),
        help="every weight's dtype (default: as the model is published)",
    )
    p.add_argument("--kv-dtype", choices=("bf16", "fp16", "fp8"), default="bf16")


def deployment_command(args: argparse.Namespace) -> int:
    from prefixscope.analysis.cost.deployment import format_splits, memory_split, parse_deployment

    shape = flags.model_shape(args, DEFAULT_MODEL)
    splits = [
        memory_split(
            shape,
            parse_deployment(name),
            gpu_memory_utilization=args.gpu_memory_utilization,
            budget_tokens=args.budget_tokens,
            block_size=args.block_size,
            weight_dtype=args.weight_dtype,
            kv_dtype=args.kv_dtype,
        )
        for name in args.deployment
    ]
    print(format_splits(splits))
    return 0


COMMAND = Command(
    "deployment",
    "what each GPU of a replica holds: weights, reserve, KV pool",
    arguments,
    deployment_command,
)

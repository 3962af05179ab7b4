"""``roofline``, ``replay`` and ``savings``: what a miss costs, and what the cache saves."""

from __future__ import annotations

import argparse

from prefixscope.analysis.cost.savings import DEFAULT_GPU, DEFAULT_MODEL
from prefixscope.cli import flags, gpu_flags
from prefixscope.cli.command import Command

#: What ``--weight-dtype`` may set every weight to (``models.WEIGHT_BYTES``).
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int4", "mxfp4")


def _outcomes(p: argparse.ArgumentParser) -> None:
    """Which configuration of ``request_outcomes`` to price."""
    p.add_argument("--outcomes-run", metavar="RUN_ID", help="simulate run (default: newest)")
    p.add_argument("--policy", help="configuration of request_outcomes to use")
    p.add_argument("--capacity-blocks", type=flags.positive_int, metavar="N")
    p.add_argument("--isolation", help="shared, salted, partitioned")


def roofline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help=f"catalog model ({DEFAULT_MODEL})")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument(
        "--gpu",
        type=gpu_flags.gpu_spec,
        default=DEFAULT_GPU,
        help="a100, h100, h200 or NAME:TFLOPS:TBPS",
    )
    p.add_argument(
        "--cached", type=flags.bounded_int(0, 2**40), required=True, help="cached prefix (tokens)"
    )
    p.add_argument(
        "--new", type=flags.bounded_int(1, 2**40), required=True, help="new tokens of the hit"
    )
    p.add_argument(
        "--tp",
        type=flags.bounded_int(1, 1024),
        help="tensor-parallel GPUs of one replica (1); figures are one GPU's",
    )
    p.add_argument(
        "--deployment",
        type=gpu_flags.parsed_deployment,
        metavar="GPUxTP",
        help="GPU and TP at once, e.g. h200x8 (instead of --gpu)",
    )
    p.add_argument(
        "--weight-dtype",
        choices=WEIGHT_DTYPES,
        help="every weight's dtype (default: as the model is published)",
    )
    p.add_argument(
        "--cost-model",
        default="auto",
        choices=("auto", "measured", "roofline"),
        help="measured: also the time from measured vLLM kernels; auto: that where they cover "
        "the model, GPU, TP and weights; roofline: the roofline (a lower bound) alone",
    )


def roofline(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from prefixscope.analysis.cost import choice
    from prefixscope.analysis.cost.rooflinetable import format_roofline

    shape = flags.model_shape(args, DEFAULT_MODEL)
    gpu, tp = args.gpu, args.tp or 1  # resolved where parsed (``gpu_flags``)
    if args.deployment is not None:
        deployment = args.deployment
        if args.tp is not None and args.tp != deployment.tp:
            raise ValueError(
                f"--tp {args.tp} and --deployment {deployment.name} disagree — give one of them"
            )
        gpu, tp = deployment.gpu, deployment.tp
    weights = args.weight_dtype
    choice.check_kind(args.cost_model, shape, gpu, tp, weights)
    measured = None
    if args.cost_model != "roofline" and choice.measured_refusal(shape, gpu, tp, weights) is None:
        measured = choice.measured_for(shape, gpu, tp, weights)
    # the roofline reads every weight at --weight-dtype; the measured model maps it to its
    # tables from the published dtype (measured.gemm_dtype)
    read = shape if weights is None else replace(shape, weight_dtype=weights, expert_dtype=None)
    print(format_roofline(read, gpu, args.cached, args.new, tp, measured))
    return 0


def replay_arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument("--model", help="catalog model (cpu: tiny-llama, cuda: llama-3-8b)")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda (%(default)s)")
    p.add_argument(
        "--samples",
        type=flags.bounded_int(1, 1_000_000),
        default=24,
        metavar="N",
        help="requests (%(default)s)",
    )
    p.add_argument(
        "--max-tokens",
        type=flags.bounded_int(1, 2**24),
        help="longer requests are scaled down to this",
    )
    p.add_argument(
        "--gpu",
        type=gpu_flags.gpu_spec,
        help="roofline spec (default: the device's, or measured on cpu)",
    )
    p.add_argument(
        "--chunk",
        type=flags.bounded_int(1, 2**24),
        help="prefill at most this many tokens per forward",
    )
    p.add_argument(
        "--repeats",
        type=flags.bounded_int(1, 10_000),
        default=5,
        help="timed runs per shape (%(default)s)",
    )
    p.add_argument("--seed", type=flags.bounded_int(0), default=0)
    _outcomes(p)


def replay(args: argparse.Namespace) -> int:
    from prefixscope.stages import replay as stage

    try:
        from prefixscope.gpu_replay.replay import ReplayOptions
    except ImportError as exc:
        raise ValueError(f"replay needs torch: pip install 'prefixscope[replay]' ({exc})") from None
    options = ReplayOptions(
        device=args.device,
        model=args.model,
        model_config=args.model_config,
        samples=args.samples,
        max_tokens=args.max_tokens,
        gpu=args.gpu,
        chunk=args.chunk,
        repeats=args.repeats,
        seed=args.seed,
        outcomes_run=args.outcomes_run,
        policy=args.policy,
        capacity_blocks=args.capacity_blocks,
        isolation=args.isolation,
    )
    run_id, result = stage.calibrate_by_replay(args.warehouse, options)
    m = result.model
    print(
        f"replayed {result.samples.num_rows} requests as miss and hit on "
        f"{result.samples['device'][0]} ({result.gpu.name} roofline); run {run_id}"
    )
    print(
        f"cost model: held-out median |error| {m.holdout_median_pct_err:.1f}%, "
        f"p90 {m.holdout_p90_pct_err:.1f}% over {m.holdout_samples} points; "
        f"median share of the roofline {result.roofline_share:.0%}"
    )
    return 0


def savings_arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument("--model", help=f"catalog model ({DEFAULT_MODEL})")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument(
        "--gpu",
        type=gpu_flags.gpu_spec_or_cpu,
        default=DEFAULT_GPU,
        help="a100, h100, h200, NAME:TFLOPS:TBPS, cpu",
    )
    p.add_argument(
        "--deployment",
        type=gpu_flags.parsed_deployment,
        metavar="GPU[xTP]",
        help="the GPUs that price a prefill, e.g. h100x1 or h200x8; their KV pool of --model "
        "bounds the capacity priced (default: the fewest GPUs of --gpu that hold the model)",
    )
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    flags.cost_model(p, "prefill times")
    flags.prices(p)
    _outcomes(p)


def savings(args: argparse.Namespace) -> int:
    from prefixscope.dashboards.savings import format_savings
    from prefixscope.stages import savings as stage
    from prefixscope.terminal import More

    settings = stage.SavingsSettings(
        model=flags.model_named(args, DEFAULT_MODEL),
        model_config=args.model_config,
        gpu=args.gpu,
        cost_model=args.cost_model,
        outcomes_run=args.outcomes_run,
        policy=args.policy,
        capacity_blocks=args.capacity_blocks,
        isolation=args.isolation,
        deployment=args.deployment,
        kv_dtype=args.kv_dtype,
        prices=args.prices,
    )
    settings.check()  # the deployment, before the warehouse is opened
    rows = stage.price_savings(args.warehouse, settings)
    print(format_savings(rows, More.of_latest(args.warehouse, "savings", "savings")))
    return 0


COMMANDS = (
    Command(
        "roofline",
        "analytic FLOPs, bytes and time of a miss and a hit",
        roofline_arguments,
        roofline,
    ),
    Command(
        "replay",
        "time sampled requests as miss and hit; fit a cost model",
        replay_arguments,
        replay,
    ),
    Command(
        "savings", "prefill GPU-seconds and TTFT saved, per tenant", savings_arguments, savings
    ),
)

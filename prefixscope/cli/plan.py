"""``prefixscope plan``: what capacity, and what fleet, reach a target share of the ceiling; or,
with ``--deployments`` and ``--slo``, the cheapest fleet that meets a latency SLO."""

from __future__ import annotations

import argparse

from prefixscope.cli import flags, gpu_flags
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
        "--gpu",
        type=gpu_flags.gpu_spec,
        default="h100",
        help="h100, h200, a100 or NAME:TFLOPS:TBPS (h100)",
    )
    flags.cost_model(p, "what prices a miss or a step")
    flags.prices(p)
    p.add_argument(
        "--load-scale",
        type=flags.load_scales,
        default=[1.0],
        metavar="S[,S...]",
        help="choose among fleet runs at this load scale (1); with --slo, search each",
    )
    p.add_argument(
        "--deployments",
        type=gpu_flags.parsed_deployments,
        metavar="GPUxTP[,...]",
        help="with --slo: the replica kinds to search (e.g. h100x1,h200x1)",
    )
    p.add_argument(
        "--slo",
        metavar="METRIC-pNN=S[,...]",
        help="the cheapest fleet of --deployments meeting every target, e.g. ttft-p95=2",
    )
    p.add_argument(
        "--engine",
        type=engine_one,
        help="with --slo: the fleet's KV pool model (vllm; ideal: a lower bound, each running "
        "request's KV beside a full prefix cache)",
    )
    p.add_argument(
        "--slo-window",
        type=flags.slo_window,
        metavar="SECONDS|all",
        help="with --slo: the SLO is held in every window of this many seconds (3600), the "
        "search run on the busiest; all: over the whole trace at once",
    )
    p.add_argument(
        "--per-window",
        action="store_true",
        help="with --slo: also size each window alone, as a perfect autoscaler would, and set "
        "its GPU-hours beside the static answer's (writes plan_slo_windows)",
    )
    p.add_argument(
        "--disagg",
        nargs="?",
        const="rdma",
        metavar="rdma|nvlink|inf|GBPS",
        help="with --slo: also the fewest GPUs split into prefill and decode pools, the KV "
        "moving over this link (rdma: a 400 Gb/s NIC per GPU), beside the colocated answer "
        "(writes plan_slo_disagg)",
    )
    p.add_argument(
        "--workers",
        type=flags.count,
        default=1,
        metavar="N",
        help="without --dask-address: processes the search fans out on here (%(default)s)",
    )
    p.add_argument("--dask-address", type=flags.dask_address, metavar="HOST:PORT")


def plan_command(args: argparse.Namespace) -> int:
    if args.slo is not None or args.deployments is not None:
        return _run_slo(args)
    for flag, value in (
        ("--engine", args.engine),
        ("--slo-window", args.slo_window),
        ("--per-window", args.per_window or None),
        ("--disagg", args.disagg),
    ):
        if value is not None:  # it would be ignored
            raise ValueError(f"{flag} applies to plan --slo — give --slo and --deployments")
    if len(args.load_scale) != 1:
        raise ValueError("without --slo, plan chooses among fleet runs at one --load-scale")
    from prefixscope.dashboards.plan import answer_text
    from prefixscope.stages import plan
    from prefixscope.terminal import More

    table = plan.plan_capacity(
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
            load_scale=args.load_scale[0],
        ),
    )
    print(answer_text(table.to_pylist(), more=More.of_latest(args.warehouse, "plan", "plan")))
    return 0


def _run_slo(args: argparse.Namespace) -> int:
    from prefixscope.dashboards import plan_slo as words
    from prefixscope.stages import plan_slo

    if not args.slo or not args.deployments:
        raise ValueError(
            "--slo and --deployments go together — give both, e.g. --deployments h100x1,h200x1 "
            "--slo ttft-p95=2"
        )
    settings = plan_slo.PlanSloSettings(
        deployments=tuple(args.deployments),
        slo=args.slo,
        load_scales=tuple(args.load_scale),
        model=flags.model_named(args, "llama-3-8b"),
        model_config=args.model_config,
        kv_dtype=args.kv_dtype,
        cost_model=args.cost_model,
        prices=args.prices,
        engine=args.engine or plan_slo.PlanSloSettings.engine,
        workers=args.workers if args.dask_address is None else None,
        dask_address=args.dask_address,
        window_s=plan_slo.PlanSloSettings.window_s if args.slo_window is None else args.slo_window,
        per_window=args.per_window,
        disagg_link=args.disagg,
    )
    settings.check()  # before the warehouse is opened: nothing written on bad input
    result = plan_slo.plan_for_slo(args.warehouse, settings)
    answers = result.answers.to_pylist()
    fleets = result.fleets.to_pylist()
    kv = {f["deployment"]: f["kv_pool_gib_per_gpu"] for f in fleets}
    for line in words.sentences(answers, settings.shape.name, kv, settings.engine):
        print(line)
    for line in words.per_window_lines(answers, result.windows.to_pylist()):
        print(line)
    if result.disagg is not None:
        for line in words.disagg_lines(result.disagg.to_pylist()):
            print(line)
    print(words.searched(result.outcomes))
    print()
    print(words.fleets_table(fleets))
    return 0


COMMAND = Command(
    "plan",
    "the capacity and fleet that reach a target hit rate, or meet an SLO",
    arguments,
    plan_command,
)


def engine_one(text: str) -> str:
    """One engine of the registry (the SLO search runs one KV pool model)."""
    (name, *more) = flags.engine_list(text)
    if more:
        raise argparse.ArgumentTypeError("--slo searches one engine at a time: give one")
    return name

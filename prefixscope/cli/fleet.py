"""``prefixscope fleet``: replicas behind a router, each with its own cache, under load."""

from __future__ import annotations

import argparse
import math

from prefixscope.analysis.fleet.caches import fleet_policies
from prefixscope.analysis.fleet.engines import ENGINES
from prefixscope.analysis.fleet.replayed import Pins
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.fleet.run import DEFAULT_BUDGET, DEFAULT_MAX_SEQS
from prefixscope.analysis.fleet.tierspec import TierSpec
from prefixscope.cli import flags, gpu_flags
from prefixscope.cli.command import Command


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--replicas", type=flags.int_list, required=True, metavar="N[,N...]", help="1 to 64"
    )
    p.add_argument("--router", type=flags.name_list, required=True, help=", ".join(ROUTERS))
    p.add_argument(
        "--deployment",
        type=gpu_flags.parsed_deployments,
        default=[],
        metavar="GPU[xTP][,...]",
        help="each replica this deployment, e.g. h100x1,h200x8: its KV pool of --model is the "
        "capacity, its GPU prices the steps",
    )
    cap = p.add_mutually_exclusive_group()
    cap.add_argument(
        "--capacity-blocks",
        type=flags.int_list,
        metavar="C[,C...]",
        help="per replica (with --deployment: a what-if)",
    )
    cap.add_argument(
        "--capacity-gib", type=flags.float_list, metavar="X[,X...]", help="per replica, of --model"
    )
    p.add_argument("--model", help="catalog model: KV bytes and step cost (llama-3-8b)")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    p.add_argument(
        "--gpu",
        type=gpu_flags.gpu_spec,
        default="h100",
        help="h100, h200, a100 or NAME:TFLOPS:TBPS: prices the steps without --deployment "
        "(%(default)s)",
    )
    flags.cost_model(p, "step times")
    flags.prices(p)
    p.add_argument(
        "--policy",
        default="lru",
        choices=sorted(fleet_policies()),
        help="the ideal engine's cache policy (%(default)s), per replica under any router; "
        "belady, pinned --pin-top, session and liveness replay each replica's routed "
        "requests: a fixed router, or one replica",
    )
    p.add_argument(
        "--ttl", type=flags.finite_float(), metavar="SECONDS", help="ttl: idle time before a drop"
    )
    p.add_argument("--pin", metavar="FILE", help="pinned: prefix hashes each replica keeps")
    p.add_argument(
        "--pin-top",
        type=flags.positive_int,
        metavar="K",
        help="pinned: each replica keeps the K most shared prefixes of its own requests",
    )
    p.add_argument(
        "--engine",
        type=flags.engine_list,
        default=["ideal"],
        metavar="E[,E...]",
        help=f"how a replica keeps KV: {', '.join(ENGINES)} (ideal: the cache apart from the "
        "running requests; vllm, sglang: one KV pool holds both)",
    )
    p.add_argument(
        "--vllm-blocks",
        action="store_true",
        help="count blocks as vLLM does under every engine: a hash-id trace's partial last "
        "block never cached, a prompt's last token always computed (--engine vllm always does)",
    )
    p.add_argument(
        "--no-answer-reuse",
        dest="cache_answers",
        action="store_false",
        help="under vllm and sglang, a request's generated blocks never hit (by default the "
        "next turn of its conversation hits them, as the engines cache them)",
    )
    p.add_argument(
        "--load-scale",
        type=flags.load_scales,
        default=[1.0],
        metavar="S[,S...]",
        help="S times the traffic: the same requests in 1/S of the time (1)",
    )
    flags.add_warm_start(p)
    p.add_argument(
        "--router-delay",
        type=flags.router_delays,
        default=[0.0],
        metavar="MS[,MS...]",
        help="kv-aware routes on the caches as they were MS ago, as a router fed by the "
        "engines' KV events sees them when the events take that long (0: as they are); "
        "several are a grid",
    )
    p.add_argument(
        "--tier",
        type=dram_tiers,
        default=[None],
        metavar="dram:GIB[:GBPS][,...]",
        help="a DRAM tier per replica (GiB of --model's KV), read at GBPS GB/s (63: PCIe 5.0 "
        "x16); several, comma-separated, or none, are a grid",
    )
    p.add_argument(
        "--shared-store",
        type=stores,
        default=[None],
        metavar="GIB[:GBPS][,...]",
        help="one store for the fleet (inf: unbounded), read at GBPS GB/s (25: a 200 Gb/s "
        "NIC); several, comma-separated, or none, are a grid",
    )
    flags.windows(p, ["all"])
    p.add_argument(
        "--budget-tokens",
        type=flags.positive_int,
        default=DEFAULT_BUDGET,
        metavar="N",
        help="tokens per step, vLLM's max_num_batched_tokens (%(default)s)",
    )
    p.add_argument(
        "--max-seqs",
        type=flags.positive_int,
        default=DEFAULT_MAX_SEQS,
        metavar="N",
        help="requests running at once per replica, vLLM's max_num_seqs (%(default)s)",
    )
    p.add_argument("--seed", type=flags.count, default=0, help="the random router's seed (0)")
    p.add_argument(
        "--no-miss-budget",
        dest="miss_budget",
        action="store_false",
        help="keep no miss budget (table miss_budget): lets --dask-address run a fixed "
        "router's replicas as separate tasks",
    )
    p.add_argument(
        "--dask-address",
        type=flags.dask_address,
        metavar="tcp://HOST:PORT",
        help="run each replica of round-robin, random and session as a task on this cluster",
    )


#: The fastest link a tier may be read over, GB/s: above any PCIe, NVLink-C2C (900) or NIC.
MAX_GBPS = 10_000.0


def _tier(text: str, what: str, unbounded: bool) -> TierSpec:
    """``GIB[:GBPS]``: GiB above 0 and at most ``flags.MAX_GIB`` (or ``inf`` where
    ``unbounded``), GB/s above 0 and at most ``MAX_GBPS``. Bounded here, as a capacity is:
    GiB beyond them overflow a block count."""
    parts = text.split(":")
    gib = math.inf if unbounded and parts[0].strip().lower() == "inf" else _figure(parts[0])
    gbps = _figure(parts[1]) if len(parts) > 1 else None
    bad_gib = not (0 < gib <= flags.MAX_GIB or (unbounded and math.isinf(gib)))
    bad_gbps = gbps is not None and not 0 < gbps <= MAX_GBPS
    if len(parts) > 2 or bad_gib or bad_gbps:
        raise argparse.ArgumentTypeError(
            f"expected {what}, with GIB above 0 and at most {flags.MAX_GIB:,.0f}"
            + (" (or inf)" if unbounded else "")
            + f" and GBPS above 0 and at most {MAX_GBPS:,.0f}, got {text!r}"
        )
    return TierSpec(gib, gbps)


def _figure(text: str) -> float:
    try:
        return flags.number(text)
    except ValueError:
        return math.nan


def dram_tiers(text: str) -> list[TierSpec | None]:
    out: list[TierSpec | None] = []
    for item in text.split(","):
        item = item.strip()
        if item.lower() == "none":
            out.append(None)
            continue
        if not item.lower().startswith("dram:"):
            raise argparse.ArgumentTypeError(f"expected dram:GIB[:GBPS] or none, got {item!r}")
        out.append(_tier(item[5:], "dram:GIB[:GBPS]", False))
    return flags.distinct(out, text)


def stores(text: str) -> list[TierSpec | None]:
    out = [
        None if item.strip().lower() == "none" else _tier(item.strip(), "GIB[:GBPS]", True)
        for item in text.split(",")
    ]
    return flags.distinct(out, text)


def fleet_command(args: argparse.Namespace) -> int:
    from prefixscope.analysis.fleet.routers import RouterSettings
    from prefixscope.analysis.simulation.capacities import Capacities
    from prefixscope.dashboards.text import format_budget, format_fleet, format_warm_start
    from prefixscope.stages import fleet
    from prefixscope.terminal import More

    if not (args.deployment or args.capacity_blocks or args.capacity_gib):
        raise ValueError(
            "no capacity to simulate — give --deployment GPU[xTP], or --capacity-blocks or "
            "--capacity-gib"
        )
    model = flags.model_named(args, "llama-3-8b")
    settings = fleet.FleetSettings(
        routers=tuple(args.router),
        replicas=tuple(args.replicas),
        capacities=Capacities(
            blocks=args.capacity_blocks,
            gib=args.capacity_gib,
            model=model,
            model_config=args.model_config,
            kv_dtype=args.kv_dtype,
        ),
        policy=args.policy,
        ttl_s=args.ttl,
        pins=Pins(args.pin_top, args.pin),
        load_scales=tuple(args.load_scale),
        router_delays=tuple(d / 1e3 for d in args.router_delay),
        **({"warm_start": args.warm_start} if args.warm_start else {}),
        engines=tuple(args.engine),
        vllm_blocks=args.vllm_blocks,
        cache_answers=args.cache_answers,
        drams=tuple(args.tier),
        stores=tuple(args.shared_store),
        windows=tuple(args.window),
        model=model,
        model_config=args.model_config,
        deployments=tuple(args.deployment),
        kv_dtype=args.kv_dtype,
        gpu=args.gpu,
        cost_model=args.cost_model,
        budget_tokens=args.budget_tokens,
        max_seqs=args.max_seqs,
        router_settings=RouterSettings(seed=args.seed),
        workers=1,
        dask_address=args.dask_address,
        prices=args.prices,
        miss_budget=args.miss_budget,
    )
    settings.check()  # names and numbers, then the cluster, before the warehouse is opened
    if args.dask_address:
        from prefixscope.analysis.fanout import client_for

        client_for(args.dask_address)
    result = fleet.simulate_fleets(args.warehouse, settings)
    more = More.of_run(args.warehouse, "fleet_hit_rates", result.run_id)
    print(format_warm_start(result.hit_rates) + format_fleet(result.hit_rates, more))
    budget = format_budget(result.budget, More.of_run(args.warehouse, "miss_budget", result.run_id))
    if budget:
        print(budget)
    for o in result.outcomes:  # a ring of cache changes that filled (``fleet/_stale.py``)
        if o.view_early:
            f = o.fleet
            print(f"note: {f.router}@{f.router_delay_s * 1e3:g}ms at {f.replicas} × "
                  f"{f.capacity_blocks:,} blocks, load {f.load_scale:g}x: {o.view_early:,} cache "
                  "changes reached the router's view before they were that old (more pending "
                  "than a replica's ring holds): its view was fresher than asked")  # fmt: skip
    return 0


COMMAND = Command(
    "fleet", "simulate replicas behind a router, under load", arguments, fleet_command
)

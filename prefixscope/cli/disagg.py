"""``prefixscope disagg``: a disaggregated fleet (prefill replicas, the KV's link, decode
replicas) beside the colocated fleet of the same GPUs."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from prefixscope.cli import flags, gpu_flags
from prefixscope.cli.command import Command

if TYPE_CHECKING:
    from prefixscope.analysis.cost.deployment import Deployment

_POOL = re.compile(r"(?P<deployment>[^*]+)\*(?P<n>[0-9]{1,3})")


def pool(text: str) -> tuple[Deployment, int]:
    """``GPU[xTP]*N``: N replicas of a deployment, resolved here (a GPU file read once: the
    settings take the deployment, not its name, which a file's GPU may not read back by)."""
    m = _POOL.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"expected GPU[xTP]*N, e.g. h200x8*3, got {text!r}")
    return gpu_flags.parsed_deployment(m["deployment"]), int(m["n"])


def arguments(p: argparse.ArgumentParser) -> None:
    from prefixscope.analysis.fleet.engines import ENGINES
    from prefixscope.analysis.fleet.routers import ROUTERS
    from prefixscope.analysis.fleet.run import DEFAULT_BUDGET, DEFAULT_MAX_SEQS

    flags.warehouse(p)
    p.add_argument(
        "--prefill",
        type=pool,
        required=True,
        metavar="GPU[xTP]*N",
        help="the prefill pool: N replicas, each holding a prefix cache (its KV pool)",
    )
    p.add_argument(
        "--decode",
        type=pool,
        required=True,
        metavar="GPU[xTP]*N",
        help="the decode pool: N replicas, each holding its running requests' KV",
    )
    p.add_argument(
        "--router",
        default="kv-aware",
        choices=sorted(ROUTERS),
        help="routes requests to prefill replicas (%(default)s)",
    )
    p.add_argument(
        "--engine",
        default="ideal",
        choices=list(ENGINES),
        help="how a prefill replica keeps KV (%(default)s)",
    )
    p.add_argument(
        "--kv-link",
        default="rdma",
        metavar="rdma|nvlink|inf|GBPS",
        help="what the KV moves over, GB/s one way per GPU: rdma (between nodes: a 400 Gb/s "
        "NIC per GPU, 200 on A100), nvlink (within a node: the GPU's), inf, or a figure "
        "(%(default)s)",
    )
    p.add_argument("--model", help="catalog model (llama-3-8b)")
    p.add_argument(
        "--model-config", type=flags.model_config, metavar="FILE", help="a Hugging Face config.json"
    )
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    flags.cost_model(p, "step times")
    p.add_argument(
        "--load-scale",
        type=flags.finite_float(),
        default=1.0,
        metavar="S",
        help="S times the traffic: the same requests in 1/S of the time (1)",
    )
    p.add_argument(
        "--budget-tokens",
        type=flags.positive_int,
        default=DEFAULT_BUDGET,
        metavar="N",
        help="tokens per prefill step, vLLM's max_num_batched_tokens (%(default)s)",
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
        "--no-colocated",
        dest="colocated",
        action="store_false",
        help="skip the colocated fleet of the same GPUs",
    )


def disagg_command(args: argparse.Namespace) -> int:
    from prefixscope.dashboards.text import format_disagg
    from prefixscope.stages.disagg import DisaggSettings, simulate_disagg_fleets

    (prefill, n_prefill), (decode, n_decode) = args.prefill, args.decode
    settings = DisaggSettings(
        prefill=prefill,
        prefill_replicas=n_prefill,
        decode=decode,
        decode_replicas=n_decode,
        router=args.router,
        engine=args.engine,
        model=flags.model_named(args, "llama-3-8b"),
        model_config=args.model_config,
        kv_dtype=args.kv_dtype,
        link=args.kv_link,
        load_scale=args.load_scale,
        cost_model=args.cost_model,
        budget_tokens=args.budget_tokens,
        max_seqs=args.max_seqs,
        seed=args.seed,
        colocated=args.colocated,
    )
    settings.check()
    result = simulate_disagg_fleets(args.warehouse, settings)
    print(format_disagg(result.rows))
    return 0


COMMAND = Command(
    "disagg",
    "a disaggregated fleet (prefill and decode pools) beside the colocated one",
    arguments,
    disagg_command,
)

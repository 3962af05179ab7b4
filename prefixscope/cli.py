"""The ``prefixscope`` command line. Each subcommand is a thin shell over the same library
functions the Prefect tasks call; every command that writes records itself in ``runs``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from prefixscope import __version__

DEFAULT_WAREHOUSE = "prefixscope.duckdb"
#: Field-mapping flags (``--NAME-field PATH``) of the token and gateway-log formats.
FIELD_FLAGS = (
    "token",
    "timestamp",
    "tenant",
    "session",
    "request_id",
    "output_tokens",
    "request",
    "response",
)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v.replace("_", "")) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        value = float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"expected a duration like 30s, 5m, 1h: {text!r}"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def _name_list(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _timestamp(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give a time zone, e.g. {text}Z for UTC")
    return value


def build_parser() -> argparse.ArgumentParser:
    from prefixscope.analysis.policies import POLICIES
    from prefixscope.ingest.formats import DEFAULT_START, DEFAULT_TENANT, FORMATS

    POLICY_NAMES = list(POLICIES)  # noqa: N806

    parser = argparse.ArgumentParser(
        prog="prefixscope", description="What a prefix (KV) cache is really worth."
    )
    parser.add_argument("--version", action="version", version=f"prefixscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def warehouse_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--warehouse", default=DEFAULT_WAREHOUSE, help="DuckDB file (%(default)s)")

    p = sub.add_parser("ingest", help="read request logs into the requests table")
    p.add_argument("--format", required=True, choices=sorted(FORMATS))
    p.add_argument("--input", nargs="+", required=True, metavar="FILE", help="plain or .gz")
    warehouse_arg(p)
    p.add_argument("--tenant", default=DEFAULT_TENANT, help="tenant of every request (%(default)s)")
    p.add_argument("--block-size", type=int, help="tokens per block (mooncake 512, others 16)")
    p.add_argument(
        "--start",
        type=_timestamp,
        default=DEFAULT_START,
        help="instant that relative timestamps count from (default: the Unix epoch)",
    )
    p.add_argument("--tenant-from", choices=["type"], help="bailian: the tenant is the type")
    p.add_argument(
        "--timestamp-unit",
        choices=["s", "ms", "us"],
        default="s",
        help="tokens, openai: unit of numeric timestamps (%(default)s)",
    )
    p.add_argument(
        "--salt-tenants",
        action="store_true",
        help="tokens, openai: a per-tenant salt in each first block (no sharing)",
    )
    p.add_argument(
        "--pseudonymize-tenants",
        metavar="KEY",
        help="store a keyed hash of each tenant name instead of the name",
    )
    p.add_argument("--chat-template", metavar="FILE", help="openai: Jinja chat template")
    p.add_argument("--tokenizer", metavar="FILE", help="openai: the model's tokenizer.json")
    for name in FIELD_FLAGS:
        p.add_argument(
            f"--{name.replace('_', '-')}-field",
            dest=f"{name}_field",
            metavar="PATH",
            help=f"tokens, openai: where the {name.replace('_', ' ')} is",
        )

    p = sub.add_parser("simulate", help="replay requests through a simulated prefix cache")
    warehouse_arg(p)
    p.add_argument("--policy", type=_name_list, required=True, help=", ".join(POLICY_NAMES))
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--capacity-blocks", type=_int_list, metavar="N[,N...]")
    cap.add_argument("--capacity-tokens", type=_int_list, metavar="N[,N...]")
    cap.add_argument(
        "--capacity-gib",
        type=_float_list,
        metavar="X[,X...]",
        help="KV cache GiB of --model or --model-config",
    )
    p.add_argument("--model", help="catalog model for --capacity-gib (e.g. llama-3-8b)")
    p.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json")
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    p.add_argument(
        "--window",
        type=_name_list,
        default=["all"],
        help="all, last-half, steady (comma-separated)",
    )
    p.add_argument(
        "--isolation",
        type=_name_list,
        default=["shared"],
        help="shared, salted, partitioned (comma-separated)",
    )
    p.add_argument("--quota-file", metavar="FILE", help="partitioned: tenant,share lines")
    p.add_argument("--ttl", type=float, metavar="SECONDS", help="ttl: idle time before a drop")
    p.add_argument("--pin", metavar="FILE", help="pinned: prefix hashes to keep")
    p.add_argument("--pin-top", type=int, metavar="K", help="pinned: the K most shared prefixes")
    p.add_argument(
        "--bucket",
        type=_duration,
        default=300.0,
        metavar="DURATION",
        help="time bucket of hit_rate_timeseries, e.g. 5m, 30s, 1h (5m)",
    )
    p.add_argument(
        "--outcomes",
        action="store_true",
        help="also write request_outcomes for every configuration",
    )

    _add_curve_parser(sub, warehouse_arg)
    _add_structure_parser(sub, warehouse_arg)

    p = sub.add_parser("report", help="write the self-contained report page")
    warehouse_arg(p)
    p.add_argument("--out", default="report.html")

    def fleet_report_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--input", nargs="+", required=True, metavar="FILE")
        p.add_argument("--format", default="mooncake", choices=sorted(FORMATS))
        warehouse_arg(p)
        p.add_argument("--out", default="report.html")
        p.add_argument("--tenant", default=DEFAULT_TENANT)
        p.add_argument("--policy", type=_name_list, help="ceiling,lru,fifo,s3fifo,belady")
        p.add_argument("--capacity-blocks", type=_int_list, metavar="N[,N...]")
        p.add_argument("--window", type=_name_list, help="all,last-half,steady")
        p.add_argument("--savings-model", default="llama-3-8b", help="model the savings price")
        p.add_argument(
            "--dask-address",
            metavar="tcp://HOST:PORT",
            help="run the simulations on this running Dask cluster (default: threads here)",
        )
        p.add_argument("--savings-gpu", default="h100", help="GPU the savings price")
        p.add_argument(
            "--replay-samples",
            type=int,
            default=0,
            metavar="N",
            help="also calibrate a cost model on N replayed requests (needs torch)",
        )

    p = sub.add_parser("fleet-report", help="run the fleet_report flow: ingest, simulate, report")
    fleet_report_args(p)
    p = sub.add_parser(
        "schedule",
        help="serve the fleet_report flow on a cron schedule (needs a running Prefect server)",
    )
    fleet_report_args(p)
    p.add_argument("--cron", required=True, help='e.g. "0 * * * *": every hour')
    p.add_argument("--name", default="fleet-report", help="deployment name (%(default)s)")
    _miss_cost_parsers(sub, warehouse_arg)
    return parser


def _add_curve_parser(sub, warehouse_arg) -> None:  # type: ignore[no-untyped-def]
    p = sub.add_parser(
        "curve", help="token hit rate at every cache capacity (the mrc table), per tenant"
    )
    warehouse_arg(p)
    p.add_argument("--policy", default="lru", help="lru (exact, one pass) or fifo, lfu, ...")
    p.add_argument("--window", type=_name_list, default=["all"], help="all, last-half, steady")
    p.add_argument("--isolation", default="shared", choices=["shared", "salted", "partitioned"])
    p.add_argument("--quota-file", metavar="FILE", help="partitioned: tenant,share lines")
    p.add_argument(
        "--sample-rate",
        type=float,
        default=1.0,
        metavar="R",
        help="estimate from a sample of a share R, capacities scaled by 1/R (1: exact)",
    )
    p.add_argument(
        "--sample-by",
        default="block",
        choices=["block", "block-head", "family"],
        help="what a sample keeps: blocks (lru; default), blocks with the first block of every "
        "request kept whole (lru), or whole prefix families (any policy)",
    )
    p.add_argument("--points", type=int, help="log-spaced capacities (lru 256, others 24)")
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--capacity-blocks", type=_int_list, metavar="N[,N...]", help="add points")
    cap.add_argument("--capacity-tokens", type=_int_list, metavar="N[,N...]")
    cap.add_argument("--capacity-gib", type=_float_list, metavar="X[,X...]")
    p.add_argument("--model", help="catalog model: adds capacity_gib to every row")
    p.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json")
    p.add_argument("--kv-dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    p.add_argument("--ttl", type=float, metavar="SECONDS", help="ttl: idle time before a drop")
    p.add_argument("--workers", type=int, help="grid curves: processes (one per core)")
    p.add_argument(
        "--dask-address",
        metavar="tcp://HOST:PORT",
        help="grid curves: run the capacities on this running Dask cluster",
    )


def _miss_cost_parsers(sub, warehouse_arg) -> None:  # type: ignore[no-untyped-def]
    """`roofline`, `replay` and `savings`: what a miss costs, and what the cache saves."""
    from prefixscope.analysis.savings import COST_MODEL_KINDS, DEFAULT_GPU, DEFAULT_MODEL

    def outcomes_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--outcomes-run", metavar="RUN_ID", help="simulate run (default: newest)")
        p.add_argument("--policy", help="configuration of request_outcomes to use")
        p.add_argument("--capacity-blocks", type=int, metavar="N")
        p.add_argument("--isolation", help="shared, salted, partitioned")

    p = sub.add_parser("roofline", help="analytic FLOPs, bytes and time of a miss and a hit")
    p.add_argument("--model", default=DEFAULT_MODEL, help="catalog model (%(default)s)")
    p.add_argument("--model-config", metavar="FILE", help="a Hugging Face config.json")
    p.add_argument("--gpu", default=DEFAULT_GPU, help="a100, h100, h200 or NAME:TFLOPS:TBPS")
    p.add_argument("--cached", type=int, required=True, help="cached prefix (tokens)")
    p.add_argument("--new", type=int, required=True, help="new tokens of the hit")

    p = sub.add_parser("replay", help="time sampled requests as miss and hit; fit a cost model")
    warehouse_arg(p)
    p.add_argument("--model", help="catalog model (cpu: tiny-llama, cuda: llama-3-8b)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (%(default)s)")
    p.add_argument("--samples", type=int, default=24, metavar="N", help="requests (%(default)s)")
    p.add_argument("--max-tokens", type=int, help="longer requests are scaled down to this")
    p.add_argument("--gpu", help="roofline spec (default: the device's, or measured on cpu)")
    p.add_argument("--chunk", type=int, help="prefill at most this many tokens per forward")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per shape (%(default)s)")
    p.add_argument("--seed", type=int, default=0)
    outcomes_args(p)

    p = sub.add_parser("savings", help="prefill GPU-seconds and TTFT saved, per tenant")
    warehouse_arg(p)
    p.add_argument("--model", default=DEFAULT_MODEL, help="catalog model (%(default)s)")
    p.add_argument("--gpu", default=DEFAULT_GPU, help="a100, h100, h200, NAME:TFLOPS:TBPS, cpu")
    p.add_argument("--cost-model", default="auto", choices=COST_MODEL_KINDS)
    outcomes_args(p)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"prefixscope {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _capacities(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The capacity flags shared by ``simulate`` and ``curve``."""
    from prefixscope.analysis.simulate import Capacities

    return Capacities(
        blocks=args.capacity_blocks,
        tokens=args.capacity_tokens,
        gib=args.capacity_gib,
        model=args.model,
        model_config=args.model_config,
        kv_dtype=args.kv_dtype,
    )


def _ingest(args: argparse.Namespace) -> int:
    from prefixscope import warehouse
    from prefixscope.ingest import IngestOptions, ingest_files

    options = IngestOptions(
        tenant=args.tenant,
        block_size=args.block_size,
        start=args.start,
        tenant_from=args.tenant_from,
        salt_tenants=args.salt_tenants,
        timestamp_unit=args.timestamp_unit,
        fields=tuple(
            (name, getattr(args, f"{name}_field"))
            for name in FIELD_FLAGS
            if getattr(args, f"{name}_field")
        ),
        chat_template=args.chat_template,
        tokenizer=args.tokenizer,
        pseudonymize_key=args.pseudonymize_tenants,
    )
    params = {**vars(args), "pseudonymize_tenants": bool(args.pseudonymize_tenants)}
    with (
        warehouse.connect(args.warehouse) as con,
        warehouse.recorded_run(con, "ingest", params) as run_id,
    ):
        result = ingest_files(con, args.input, args.format, options, run_id)
    for f in result.files:
        note = " (replaced an earlier ingest of the same content)" if f.replaced else ""
        cut = "" if f.complete else " — the file ends early"
        counts = f"{f.lines:,} lines, {f.accepted:,} accepted, {f.rejected:,} rejected"
        print(f"{f.path}: {counts}{cut}{note}")
        if f.reasons:
            print("  rejected: " + ", ".join(f"{r} {n:,}" for r, n in f.reasons))
        if f.out_of_order:
            print(f"  {f.out_of_order:,} accepted requests arrive before an earlier line's (kept)")
    total = f"{result.lines:,} lines = {result.accepted:,} accepted + {result.rejected:,} rejected"
    print(f"total: {total}")
    if result.rejected:
        print(f"see the rejects table for reasons: {args.warehouse}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from prefixscope import warehouse
    from prefixscope.analysis.simulate import Settings, run_simulation
    from prefixscope.dashboards.text import format_hit_rates

    capacities = _capacities(args)
    settings = Settings(
        windows=tuple(args.window),
        ttl_s=args.ttl,
        pin_file=args.pin,
        pin_top=args.pin_top,
        quota_file=args.quota_file,
        bucket_s=args.bucket,
        outcomes=args.outcomes,
    )
    with warehouse.connect(args.warehouse) as con:
        table = run_simulation(con, args.policy, capacities, settings, args.isolation, vars(args))
    print(format_hit_rates(table))
    return 0


def _curve(args: argparse.Namespace) -> int:
    from prefixscope import warehouse
    from prefixscope.analysis.mrc import CurveSettings, run_curve
    from prefixscope.dashboards.text import format_curve

    settings = CurveSettings(
        policy=args.policy,
        windows=tuple(args.window),
        isolation=args.isolation,
        points=args.points,
        sample_rate=args.sample_rate,
        sample_by=args.sample_by,
        model=args.model,
        model_config=args.model_config,
        kv_dtype=args.kv_dtype,
        quota_file=args.quota_file,
        ttl_s=args.ttl,
        workers=args.workers,
        dask_address=args.dask_address,
    )
    capacities = _capacities(args)
    with warehouse.connect(args.warehouse) as con:
        table = run_curve(con, settings, capacities, vars(args))
    print(format_curve(table))
    return 0


def _report(args: argparse.Namespace) -> int:
    from prefixscope import warehouse
    from prefixscope.dashboards import build_report

    with (
        warehouse.connect(args.warehouse) as con,
        warehouse.recorded_run(con, "report", vars(args)),
    ):
        out = build_report(con, args.out, Path(args.warehouse).name)
    print(f"report: {out}")
    return 0


def _fleet_report_parameters(args: argparse.Namespace) -> dict[str, object]:
    from prefixscope.pipelines.fleet_report import DEFAULT_CAPACITIES

    return {
        "inputs": [str(p) for p in args.input],
        "warehouse_path": args.warehouse,
        "report_path": args.out,
        "format_name": args.format,
        "tenant": args.tenant,
        "policies": args.policy or None,
        "capacities_blocks": args.capacity_blocks or list(DEFAULT_CAPACITIES),
        "windows": args.window or None,
        "savings_model": args.savings_model,
        "savings_gpu": args.savings_gpu,
        "replay_samples": args.replay_samples,
    }


def _schedule(args: argparse.Namespace) -> int:
    from prefixscope.pipelines.deployments import serve_fleet_report

    if args.dask_address:
        print("schedule: --dask-address is for one-off runs", file=sys.stderr)
        return 2
    parameters = _fleet_report_parameters(args)
    # Scheduled runs start elsewhere: paths must not depend on this shell's directory.
    for key in ("warehouse_path", "report_path"):
        parameters[key] = str(Path(str(parameters[key])).resolve())
    parameters["inputs"] = [
        p if Path(p).is_absolute() else str(Path.cwd() / p)
        for p in parameters["inputs"]  # type: ignore[attr-defined]
    ]
    try:
        serve_fleet_report(args.cron, parameters, args.name)
    except RuntimeError as e:
        print(f"schedule: {e}", file=sys.stderr)
        return 2
    return 0


def _fleet_report(args: argparse.Namespace) -> int:
    from prefixscope.pipelines.fleet_report import fleet_report
    from prefixscope.pipelines.runners import run_flow

    outcome = run_flow(fleet_report, args.dask_address, **_fleet_report_parameters(args))
    print(f"warehouse: {Path(outcome.warehouse).resolve()}")
    print(f"report:    {Path(outcome.report).resolve()}")
    print(
        f"ingested:  {outcome.lines:,} lines = {outcome.accepted:,} accepted"
        f" + {outcome.rejected:,} rejected"
    )
    print(outcome.table)
    print(outcome.savings)
    return 0


def _add_structure_parser(sub, warehouse_arg) -> None:  # type: ignore[no-untyped-def]
    p = sub.add_parser(
        "structure",
        help="conversation turns, shared prefixes, hit sources, reuse breaks and reuse times",
    )
    warehouse_arg(p)
    p.add_argument(
        "--capacity-blocks",
        type=int,
        default=16_000,
        metavar="N",
        help="capacity of the simulated configuration: lru, and pinned per prefix (%(default)s)",
    )
    p.add_argument("--top", type=int, default=20, help="shared prefixes to keep (%(default)s)")
    p.add_argument(
        "--simulate-top",
        type=int,
        default=10,
        metavar="K",
        help="of those, how many to simulate pinned (%(default)s)",
    )
    p.add_argument(
        "--max-forks",
        type=int,
        default=None,
        metavar="F",
        help="turn inference: continuations a parent's last full block may have (2)",
    )


def _structure(args: argparse.Namespace) -> int:
    from prefixscope import warehouse
    from prefixscope.analysis.structure import StructureSettings, run_structure
    from prefixscope.dashboards.structure import format_structure

    settings = StructureSettings(
        capacity_blocks=args.capacity_blocks,
        top=args.top,
        simulate_top=args.simulate_top,
        **({"max_forks": args.max_forks} if args.max_forks is not None else {}),
    )
    with warehouse.connect(args.warehouse) as con:
        run_id, tables = run_structure(con, settings, vars(args))
    print(f"structure run {run_id}")
    print(format_structure(tables))
    return 0


_COMMANDS = {
    "ingest": _ingest,
    "simulate": _simulate,
    "curve": _curve,
    "report": _report,
    "structure": _structure,
    "fleet-report": _fleet_report,
    "schedule": _schedule,
}


def _roofline(args: argparse.Namespace) -> int:
    from prefixscope.analysis.gpus import resolve_gpu
    from prefixscope.analysis.models import resolve_model
    from prefixscope.dashboards.savings import format_roofline

    shape = resolve_model(args.model, args.model_config)
    print(format_roofline(shape, resolve_gpu(args.gpu), args.cached, args.new))
    return 0


def _replay(args: argparse.Namespace) -> int:
    from prefixscope import warehouse

    try:
        from prefixscope.gpu_replay.replay import ReplayOptions, run_replay
    except ImportError as exc:
        raise ValueError(f"replay needs torch: pip install 'prefixscope[replay]' ({exc})") from None
    options = ReplayOptions(
        device=args.device,
        model=args.model,
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
    with warehouse.connect(args.warehouse) as con:
        result = run_replay(con, options, vars(args))
    m = result.model
    print(
        f"replayed {result.samples.num_rows} requests as miss and hit on "
        f"{result.samples['device'][0]} ({result.gpu.name} roofline); run {result.run_id}"
    )
    print(
        f"cost model: held-out median |error| {m.holdout_median_pct_err:.1f}%, "
        f"p90 {m.holdout_p90_pct_err:.1f}% over {m.holdout_samples} points; "
        f"median share of the roofline {result.roofline_share:.0%}"
    )
    return 0


def _savings(args: argparse.Namespace) -> int:
    from prefixscope import warehouse
    from prefixscope.analysis.savings import run_savings
    from prefixscope.dashboards.savings import format_savings

    with warehouse.connect(args.warehouse) as con:
        table = run_savings(
            con,
            args.model,
            args.gpu,
            args.cost_model,
            args.outcomes_run,
            args.policy,
            args.capacity_blocks,
            args.isolation,
        )
    print(format_savings(table))
    return 0


_COMMANDS.update({"roofline": _roofline, "replay": _replay, "savings": _savings})

if __name__ == "__main__":
    sys.exit(main())

"""``fleet-report`` (the Prefect flow, once) and ``schedule`` (the flow on a cron schedule)."""

from __future__ import annotations

import argparse
from pathlib import Path

from prefixscope.cli import flags
from prefixscope.cli.command import Command
from prefixscope.ingest.formats import DEFAULT_TENANT, FORMATS
from prefixscope.pipelines.served import FLOW_GPU as DEFAULT_FLOW_GPU
from prefixscope.pipelines.served import FLOW_MODEL as DEFAULT_FLOW_MODEL
from prefixscope.resources import ResourceError


def fleet_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", nargs="+", action="extend", required=True, metavar="FILE")
    p.add_argument("--format", default="mooncake", choices=sorted(FORMATS))
    flags.warehouse(p)
    p.add_argument("--out", type=flags.out_file, default="report.html")
    p.add_argument(
        "--metrics-out",
        type=flags.out_file,
        metavar="FILE.prom",
        help="also write the latest figures as OpenMetrics text (docs/export.md#metrics)",
    )
    p.add_argument("--tenant", type=flags.tenant_name, default=DEFAULT_TENANT)
    p.add_argument("--tenant-from", choices=["type"], help="bailian: the tenant is the type")
    p.add_argument(
        "--tenant-field",
        metavar="PATH",
        help="the field that names each request's tenant (e.g. tenant, or user.org)",
    )
    p.add_argument(
        "--synthetic-tenants",
        type=flags.tenant_list,
        metavar="NAME[,NAME...]",
        help="also ingest a synthetic log of these tenants, written beside the warehouse "
        "(prefixscope.synthetic; make demo: chat,search,agent)",
    )
    p.add_argument(
        "--isolation",
        type=flags.name_list,
        help="how tenants share each cache: shared (default), salted, partitioned",
    )
    p.add_argument("--policy", type=flags.name_list, help="ceiling,lru,fifo,s3fifo,belady")
    p.add_argument("--capacity-blocks", type=flags.int_list, metavar="N[,N...]")
    p.add_argument(
        "--fleet-replicas",
        type=flags.int_list,
        metavar="N[,N...]",
        help="replica counts of the fleet step, every router at each (4,8)",
    )
    flags.windows(p)
    p.add_argument(
        "--savings-model", help=f"model the report prices throughout ({DEFAULT_FLOW_MODEL})"
    )
    p.add_argument(
        "--savings-model-config",
        type=flags.model_config,
        metavar="FILE",
        help="a Hugging Face config.json of the model the savings price",
    )
    p.add_argument(
        "--dask-address",
        type=flags.dask_address,
        metavar="tcp://HOST:PORT",
        help="run the simulations on this running Dask cluster (default: here)",
    )
    p.add_argument(
        "--workers",
        type=flags.count,
        default=1,
        metavar="N",
        help="without --dask-address: processes the simulations fan out on here (%(default)s)",
    )
    p.add_argument(
        "--savings-gpu",
        type=flags.gpu_or_cpu,
        default=DEFAULT_FLOW_GPU,
        help="GPU the report prices on (%(default)s: the fewest that hold the model)",
    )
    flags.hash_key_file(p)
    p.add_argument(
        "--fresh",
        action="store_true",
        help="run every stage, where a run of this flow on the same inputs and settings would "
        "reuse the stages an earlier run of it finished",
    )
    p.add_argument(
        "--replay-samples",
        type=flags.count,
        default=0,
        metavar="N",
        help="also calibrate a cost model on N replayed requests (needs torch)",
    )


def parameters(args: argparse.Namespace) -> dict[str, object]:
    """The flow's parameters from the command's flags."""
    from prefixscope.pipelines.parameters import DEFAULT_CAPACITIES

    return {
        "inputs": [str(p) for p in args.input],
        "warehouse_path": args.warehouse,
        "report_path": args.out,
        "metrics_path": args.metrics_out,
        "format_name": args.format,
        "tenant": args.tenant,
        "tenant_from": args.tenant_from,
        "tenant_field": args.tenant_field,
        "isolations": args.isolation or None,
        "synthetic_tenants": args.synthetic_tenants or None,
        "policies": args.policy or None,
        "capacities_blocks": args.capacity_blocks or list(DEFAULT_CAPACITIES),
        "windows": args.window or None,
        "savings_model": savings_model(args),
        "savings_model_config": args.savings_model_config,
        "savings_gpu": args.savings_gpu,
        "replay_samples": args.replay_samples,
        "fleet_replicas": args.fleet_replicas or None,
        "workers": args.workers,
        "hash_key_file": args.hash_key_file,
    }


def savings_model(args: argparse.Namespace) -> str:
    """``--savings-model``, else the name ``--savings-model-config``'s shape takes, else the
    flow's model (``pipelines/parameters.py``: ``DEFAULT_FLOW_MODEL``)."""
    return flags.model_named(
        argparse.Namespace(model=args.savings_model, model_config=args.savings_model_config),
        DEFAULT_FLOW_MODEL,
    )


def check(args: argparse.Namespace, serving: bool = False) -> dict[str, object]:
    """The flow's parameters, each checked (``pipelines/parameters.py``), and the Dask
    cluster reached, before the flow (and Prefect's temporary server) starts: a wrong flag
    stops the command in a second, with one line and nothing written."""
    from prefixscope.pipelines.parameters import check as check_parameters

    params = parameters(args)
    check_parameters(**params, dask_address=args.dask_address, serving=serving)  # type: ignore[arg-type]
    if args.dask_address:
        from prefixscope.analysis.fanout import client_for

        client_for(args.dask_address)
    return params


def fleet_report(args: argparse.Namespace) -> int:
    """The flow once; prints its short answer (the full tables are on the page and in the
    warehouse). Prefect's own INFO lines are quieted first, before Prefect is imported; a
    stage's failure reaches the terminal as the command's one line only (its traceback stays
    in the flow run's logs)."""
    from prefixscope.pipelines import settings

    settings.quiet()
    params = check(args)
    from prefixscope.pipelines.console import failures_off_the_terminal
    from prefixscope.pipelines.fleet_report import fleet_report as flow

    with failures_off_the_terminal():
        try:
            outcome = flow(**params, dask_address=args.dask_address, fresh=args.fresh)
        except Exception as exc:
            lost = server_lost(exc)
            if lost is None:
                raise
            raise ResourceError(lost) from None
    print(outcome.summary)
    return 0


def server_lost(exc: BaseException) -> str | None:
    """The one line for a flow whose Prefect server died, could not start or cannot be
    reached (None: ``exc`` is something else): what Prefect raises then is an HTTP transport
    error of its client, or its own timeout waiting for its temporary server."""
    import httpx

    if isinstance(exc, ResourceError):
        return None  # already its own line
    seen: BaseException | None = exc
    while seen is not None:
        text = " ".join(str(seen).split())
        transport = isinstance(seen, httpx.TransportError)
        if transport or (isinstance(seen, RuntimeError) and "Prefect API server" in text):
            return (
                f"the flow lost its Prefect server ({type(seen).__name__}: {text[:160]}); "
                "the stages that finished are kept in the warehouse — run the same command "
                "again to resume, with PREFECT_API_URL unset (a temporary server) or set to a "
                "running one (`prefect server start`)"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def schedule_arguments(p: argparse.ArgumentParser) -> None:
    fleet_report_arguments(p)
    p.add_argument("--cron", required=True, help='e.g. "0 * * * *": every hour')
    p.add_argument("--name", default="fleet-report", help="deployment name (%(default)s)")


def schedule(args: argparse.Namespace) -> int:
    from prefixscope.pipelines.deployments import check_cron, serve_fleet_report, served_by

    if args.dask_address:
        raise ValueError(
            "--dask-address is for one-off runs — run `prefixscope fleet-report` with it, or "
            "schedule without it"
        )
    served_by()  # a schedule needs a running server: say so before anything else
    params = check(args, serving=True)
    check_cron(args.cron)
    # Scheduled runs start elsewhere: paths must not depend on this shell's directory.
    for key in ("warehouse_path", "report_path", "metrics_path"):
        if params[key] is not None:
            params[key] = str(Path(str(params[key])).resolve())
    params["inputs"] = [
        p if Path(p).is_absolute() else str(Path.cwd() / p)
        for p in params["inputs"]  # type: ignore[attr-defined]
    ]
    serve_fleet_report(args.cron, {**params, "fresh": args.fresh}, args.name)
    return 0


COMMANDS = (
    Command(
        "fleet-report",
        "run the fleet_report flow: ingest, simulate, report",
        fleet_report_arguments,
        fleet_report,
    ),
    Command(
        "schedule",
        "serve the fleet_report flow on a cron schedule (needs a running Prefect server)",
        schedule_arguments,
        schedule,
    ),
)

"""``fleet-report`` (the Prefect flow, once) and ``schedule`` (the flow on a cron schedule)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from prefixscope.cli import flags, gpu_flags
from prefixscope.cli.command import Command
from prefixscope.ingest.formats import FORMATS
from prefixscope.pipelines.flow_parameters import FlowParameters
from prefixscope.pipelines.served import FLOW_MODEL
from prefixscope.resources import ResourceError


def fleet_report_arguments(p: argparse.ArgumentParser) -> None:
    """The flow's flags: each one's ``dest`` is a field of ``FlowParameters``
    (``pipelines/flow_parameters.py``), whose defaults fill what is not given: no flag keeps a
    default of its own (``--warehouse`` shares the dataclass's constant with other commands)."""
    p.add_argument(
        "--input", dest="inputs", nargs="+", action="extend", required=True, metavar="FILE"
    )
    p.add_argument(
        "--format",
        dest="format_name",
        choices=sorted(FORMATS),
        help=f"({FlowParameters.format_name})",
    )
    flags.warehouse(p, dest="warehouse_path")
    p.add_argument(
        "--out",
        dest="report_path",
        type=flags.out_file,
        metavar="FILE",
        help=f"({FlowParameters.report_path})",
    )
    p.add_argument(
        "--metrics-out",
        dest="metrics_path",
        type=flags.out_file,
        metavar="FILE.prom",
        help="also write the latest figures as OpenMetrics text (docs/export.md#metrics)",
    )
    p.add_argument(
        "--tenant", type=flags.tenant_name, metavar="NAME", help=f"({FlowParameters.tenant})"
    )
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
        "--agent-input",
        dest="agent_inputs",
        nargs="+",
        action="extend",
        metavar="PATH",
        help="also ingest coding-agent traces (--format agent-json: a file, folder or archive), "
        "at the inputs' block size (make demo: data/sample/agents/)",
    )
    p.add_argument(
        "--agent-tenant",
        type=flags.tenant_name,
        metavar="NAME",
        help=f"the agent traces' tenant ({FlowParameters.agent_tenant})",
    )
    p.add_argument(
        "--agent-arrival",
        metavar="SPEC",
        help="where the agent conversations start: uniform:WINDOW or poisson:RATE "
        f"({FlowParameters.agent_arrival})",
    )
    p.add_argument(
        "--isolation",
        dest="isolations",
        type=flags.name_list,
        metavar="NAME[,NAME...]",
        help="how tenants share each cache: shared (default), salted, partitioned",
    )
    p.add_argument(
        "--policy",
        dest="policies",
        type=flags.name_list,
        metavar="NAME[,NAME...]",
        help=",".join(FlowParameters.policies),
    )
    p.add_argument(
        "--capacity-blocks", dest="capacities_blocks", type=flags.int_list, metavar="N[,N...]"
    )
    p.add_argument(
        "--fleet-replicas",
        type=flags.int_list,
        metavar="N[,N...]",
        help="replica counts of the fleet step, every router at each "
        f"({','.join(map(str, FlowParameters.fleet_replicas))})",
    )
    flags.windows(p, dest="windows")
    p.add_argument(
        "--savings-policy",
        metavar="NAME",
        help="the policy whose outcomes the savings price (lru; one of --policy)",
    )
    p.add_argument(
        "--savings-capacity-blocks",
        type=flags.bounded_int(),
        metavar="N",
        help="the capacity whose outcomes the savings price (the deployment's KV pool)",
    )
    p.add_argument("--savings-model", help=f"model the report prices throughout ({FLOW_MODEL})")
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
        metavar="N",
        help="without --dask-address: processes the simulations fan out on here "
        f"({FlowParameters.workers})",
    )
    p.add_argument(
        "--savings-gpu",
        type=gpu_flags.gpu_or_cpu,
        metavar="GPU",
        help=f"GPU the report prices on ({FlowParameters.savings_gpu}: the fewest that hold the "
        "model)",
    )
    p.add_argument(
        "--plan-target",
        type=flags.finite_float(0.0, 1.0),
        metavar="SHARE",
        help=f"the share of the ceiling the capacity plan sizes for ({FlowParameters.plan_target})",
    )
    p.add_argument(
        "--slo",
        metavar="METRIC-pNN=S[,...]",
        help=f"the SLO plan's latency targets ({FlowParameters.slo})",
    )
    flags.hash_key_file(p)
    p.add_argument(
        "--warm-start",
        metavar="cold|events|first-window:SECONDS",
        help="start the simulated caches warm (simulate and fleet): as the ingested KV events "
        "left the engine at the trace's first arrival, or after the trace's first SECONDS "
        f"({FlowParameters.warm_start})",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="run every stage, where a run of this flow on the same inputs and settings would "
        "reuse the stages an earlier run of it finished",
    )
    p.add_argument(
        "--replay-samples",
        type=flags.count,
        metavar="N",
        help="also calibrate a cost model on N replayed requests (needs torch)",
    )


def flow_parameters(args: argparse.Namespace) -> FlowParameters:
    """The flow's parameters from the command's flags, by their ``dest``; the savings model
    named after ``--savings-model-config``'s shape where only that is given."""
    given = vars(args) | {"savings_model": savings_model(args)}
    return FlowParameters.given(given)


def savings_model(args: argparse.Namespace) -> str:
    """``--savings-model``, else the name ``--savings-model-config``'s shape takes, else the
    flow's model (``pipelines/served.py``: ``FLOW_MODEL``)."""
    return flags.model_named(
        argparse.Namespace(model=args.savings_model, model_config=args.savings_model_config),
        FLOW_MODEL,
    )


def check(args: argparse.Namespace, serving: bool = False) -> FlowParameters:
    """The flow's parameters, each checked (``pipelines/parameters.py``), and the Dask
    cluster reached, before the flow (and Prefect's temporary server) starts: a wrong flag
    stops the command in a second, with one line and nothing written."""
    from prefixscope.pipelines.parameters import check as check_parameters

    params = flow_parameters(args)
    check_parameters(params, serving=serving)
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
            outcome = flow(params)
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
    absolute = replace(
        params,
        inputs=tuple(p if Path(p).is_absolute() else str(Path.cwd() / p) for p in params.inputs),
        warehouse_path=str(Path(params.warehouse_path).resolve()),
        report_path=str(Path(params.report_path).resolve()),
        metrics_path=params.metrics_path and str(Path(params.metrics_path).resolve()),
    )
    serve_fleet_report(args.cron, absolute, args.name)
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

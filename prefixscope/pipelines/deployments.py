"""``fleet_report`` on a schedule: a Prefect deployment served by a long-running process.

A schedule needs a Prefect server that outlives any one run (``prefect server start``, with
``PREFECT_API_URL`` pointing at it): the temporary server a one-off run starts for itself goes
away with the run, and it cannot schedule. Input paths may be glob patterns; they are expanded
when each run starts, so logs that land between runs are picked up. A file seen before is
recognised by its content and replaced, not counted twice (docs/ingest.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect.client.schemas.schedules import CronSchedule
from prefect.deployments.runner import EntrypointType
from prefect.settings import PREFECT_API_URL

from prefixscope.pipelines.fleet_report import fleet_report
from prefixscope.pipelines.flow_parameters import FlowParameters

DEFAULT_NAME = "fleet-report"


def fleet_report_deployment(
    cron: str, params: FlowParameters, name: str = DEFAULT_NAME, tags: Sequence[str] = ()
) -> Any:
    """The deployment that runs ``fleet_report`` with ``params`` on the ``cron`` schedule. The
    server stores them as JSON, the flow's one parameter; each run validates them back into
    ``FlowParameters`` (Prefect's parameter validation), so a run gets what the command line
    checked."""
    return fleet_report.to_deployment(
        name=name,
        cron=cron,
        parameters={"params": params.stored()},
        tags=list(tags),
        description=(
            "ingest → simulate → curve → structure → fleet → plan → plan-slo → savings → report "
            "→ summary, on a schedule"
        ),
        # By module, not file: the runs import the installed package from any directory.
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def check_cron(cron: str) -> None:
    """A cron expression Prefect's schedule accepts (five fields, e.g. ``0 * * * *``)."""
    try:
        CronSchedule(cron=cron)
    except ValueError:
        raise ValueError(
            f"--cron {cron[:80]!r} is not a cron expression — give five fields, e.g. "
            "'0 * * * *' (every hour)"
        ) from None


def served_by() -> str:
    """The API URL of the Prefect server a schedule registers with; ValueError (the user's to
    fix, one line) when none is set."""
    url = PREFECT_API_URL.value()
    if not url:
        raise ValueError(
            "a schedule needs a running Prefect server — start one with `prefect server start` "
            "and set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api)"
        )
    return str(url)


def serve_fleet_report(cron: str, params: FlowParameters, name: str = DEFAULT_NAME) -> None:
    """Register the deployment with the server at ``PREFECT_API_URL`` and run its scheduled
    flow runs in this process until it is stopped."""
    served_by()
    from prefect import serve

    serve(fleet_report_deployment(cron, params, name))

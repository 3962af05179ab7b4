"""Where a flow's mapped tasks run: threads in this process, or an existing Dask cluster.

One machine is the default: mapped tasks (one simulation scenario each) run on Prefect's
thread pool, and the compiled kernels release the GIL, so they use every core. When one
machine is not enough, ``dask_address`` names the scheduler of a running Dask cluster
(``tcp://host:8786``) and the mapped tasks run on its workers; the flow itself, and the tasks
that touch the warehouse, stay in this process, so the DuckDB file never leaves it.

Dask workers report their task runs to the flow's Prefect API. Without ``PREFECT_API_URL`` a
flow talks to a temporary server it starts itself, which the workers cannot see, so each would
start one of its own (seconds per worker, and their runs lost with them). So for a Dask run
this module starts the temporary server first and hands its URL to the flow's settings, which
travel with every task to the workers. The workers must be able to import ``prefixscope``
(the same environment as this process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_LOGGING_TO_API_BATCH_INTERVAL,
    temporary_settings,
)
from prefect.task_runners import ThreadPoolTaskRunner


def task_runner(dask_address: str | None) -> Any:
    """Prefect's thread pool, or a Dask task runner connected to ``dask_address``."""
    if not dask_address:
        return ThreadPoolTaskRunner()
    from prefect_dask import DaskTaskRunner

    return DaskTaskRunner(address=dask_address)


@contextmanager
def api_for_workers(dask_address: str | None) -> Iterator[None]:
    """Inside: a Prefect API that Dask workers can reach (see the module docstring)."""
    if not dask_address or PREFECT_API_URL.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    # Prefect's own temporary server (one per process), started now rather than by the flow.
    # Like the flow's, it stops when the process exits, not when the flow does: log and event
    # senders (here and on the workers) may still be flushing, and a server stopped under
    # them leaves them retrying against a dead address.
    server = SubprocessASGIServer()
    server.start()
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield
    # Workers send their task logs in batches: let the last batch land before a CLI run exits.
    time.sleep(PREFECT_LOGGING_TO_API_BATCH_INTERVAL.value() + 0.5)


def run_flow(flow: Callable[..., Any], dask_address: str | None = None, **parameters: Any) -> Any:
    """Run ``flow`` with its mapped tasks on threads, or on the Dask cluster at
    ``dask_address``."""
    with api_for_workers(dask_address):
        return flow.with_options(task_runner=task_runner(dask_address))(**parameters)  # type: ignore[attr-defined]

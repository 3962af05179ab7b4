"""Prefect defaults for a machine with no network and no Prefect set-up.

With no ``PREFECT_API_URL``, a flow starts Prefect's local embedded server (SQLite under
``PREFECT_HOME``) and stops it at exit. The defaults below keep that server offline (no
telemetry), patient on a loaded 2-core machine, and free of services a one-shot run never reads.
"""

from __future__ import annotations

import os

DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED": "false",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
}


def apply_defaults() -> None:
    """Set each default unless the environment already says otherwise."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)


#: A one-off run from the command line prints its short answer alone: Prefect's INFO lines (the
#: temporary server starting and stopping, each task run finishing) are not shown.
QUIET: dict[str, str] = {"PREFECT_LOGGING_LEVEL": "WARNING"}


def quiet() -> None:
    """Quiet Prefect's logging for this process, unless the environment says otherwise. Call it
    before Prefect is imported: its loggers are configured once, at import."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)

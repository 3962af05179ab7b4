"""What a run from the command line shows on the terminal of Prefect's own logging.

When a stage fails, Prefect logs it twice with a traceback (the task run, then the flow run)
before the flow raises; the command then prints its one line (``prefixscope CMD: error: …``).
When its server is lost, Prefect's own services log each event they cannot send, a page of
text each; the command's line says it once.
For the length of a run from the command line, Prefect's console handlers drop those records:
a flow or task run's errors, and any record that carries a traceback. Every other handler
(the API's: the flow run's logs on the server) still receives them, so nothing is lost, only
kept off the terminal. Warnings a stage logs on purpose (a replay skipped) still show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

#: Loggers of a flow run and of its task runs (``get_run_logger``, and Prefect's own reports).
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class RunFailures(logging.Filter):
    """Drops, from the handler it is added to, what the command reports in its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("prefect"):
            return True
        if record.exc_info or record.exc_text:
            return False
        if record.name.startswith("prefect._internal") and record.levelno >= logging.ERROR:
            return False  # its services failing to reach a lost server: the command says so
        of_a_run = any(record.name == n or record.name.startswith(n + ".") for n in RUN_LOGGERS)
        return not (of_a_run and record.levelno >= logging.ERROR)


def console_handlers() -> list[logging.Handler]:
    """Prefect's handlers that write to the terminal, wherever its logging set-up put them."""
    from prefect.logging.handlers import PrefectConsoleHandler

    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    found: list[logging.Handler] = []
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, PrefectConsoleHandler) and handler not in found:
                found.append(handler)
    return found


@contextmanager
def failures_off_the_terminal() -> Iterator[None]:
    """For the length of the block, Prefect's console shows no run failure or traceback."""
    # Prefect sets its logging up once per process (its server's start only adjusts levels),
    # so the handlers found now are the ones the run writes to.
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()
    keep = RunFailures()
    handlers = console_handlers()
    for handler in handlers:
        handler.addFilter(keep)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(keep)

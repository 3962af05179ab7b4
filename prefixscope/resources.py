"""When the machine runs out: a worker process killed (by the kernel for memory, or by a
signal), a Prefect server that dies or never starts. Each ends a command with one line that
says what happened and what to do (:class:`ResourceError`, exit status 1), never a hang or a
traceback; the stages that finished keep their results.

The stage running now is kept here (:func:`running`, set by ``warehouse.StageRun``), so that a
failure deep in a fan-out can name it.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

GIB = 2**30

_STAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("stage", default=None)


class ResourceError(RuntimeError):
    """The machine could not give what a run needed; the message is the one line to print."""


@contextmanager
def running(stage: str) -> Iterator[None]:
    """``stage`` is the one running for the length of the block."""
    token = enter(stage)
    try:
        yield
    finally:
        leave(token)


def enter(stage: str) -> contextvars.Token:
    """``stage`` runs from now until :func:`leave` with the token returned."""
    return _STAGE.set(stage)


def leave(token: contextvars.Token) -> None:
    _STAGE.reset(token)


def stage() -> str | None:
    """The stage running now, if any."""
    return _STAGE.get()


def say(line: str) -> None:
    """One line on stderr, now: what a run tells its user beside its answer (a worker lost,
    fewer workers, stages reused). Written to the stream itself, not through ``print``, which a
    Prefect flow logging its prints would take to its log instead."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def memory_words() -> str:
    """``the machine has 23.4 GiB of memory, 2.1 GiB of it available``."""
    vm = psutil.virtual_memory()
    return (
        f"the machine has {vm.total / GIB:.1f} GiB of memory, {vm.available / GIB:.1f} GiB of "
        "it available now"
    )


def give_back_heap() -> None:
    """Collect garbage, then hand the C heap's free pages back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). Arrays under glibc's mmap threshold (it rises to 32 MB
    as large ones are freed) live in the heap, and a freed one stays resident there: a stage's
    or a task's peak would otherwise stay counted against the next one's."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@contextmanager
def heap_given_back() -> Iterator[None]:
    """:func:`give_back_heap` once the block ends, however it ends."""
    try:
        yield
    finally:
        give_back_heap()


@functools.cache
def _malloc_trim():  # type: ignore[no-untyped-def]
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # another C library (musl): nothing to hand back
        return None


def available_bytes() -> int:
    return int(psutil.virtual_memory().available)


def worker_lost(how: str) -> ResourceError:
    """The one line for a worker process lost twice on the same task."""
    where = stage()
    name = f"the {where} stage" if where else "a fan-out"
    return ResourceError(
        f"{name} lost a worker process ({how}), and again when its task ran on a fresh one; "
        f"{memory_words()} — run with --workers 1, on a cluster with --dask-address, or on "
        "less of the trace (a shorter --slo-window, fewer capacities or replicas)"
    )

"""What the timed benchmarks share: running on one core."""

from __future__ import annotations

import os

import numba


def one_core() -> str:
    """Pin this process (and so its children: a peer it runs) to one CPU and numba to one
    thread; says which CPU."""
    numba.set_num_threads(1)
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    return f"CPU {cpu} of {os.cpu_count()}"

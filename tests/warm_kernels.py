"""Compile the fleet loop once per test run, into numba's on-disk cache, beside the tests.

Without it every test process, and the demo's flow beside them, compiles the fleet loop
(``fleet/_kernel.py``) on its own first call: 113–134 s of one core each (four runs, stop 72,
benchmarks/RESULTS.md), the largest item of the suite's cold time. Under xdist the controller
starts :func:`start` before its workers (``conftest.pytest_sessionstart``); the workers run
tests meanwhile, and the first call of the loop in each waits for this one compile and loads it
from the cache (:func:`await_in_worker`).

    python -m tests.warm_kernels MARKER   # compile, then write MARKER
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: where the workers learn of the compile: "MARKER:PID"
ENV = "PREFIXSCOPE_TEST_FLEET_COMPILE"


def compile_fleet() -> None:
    """One small fleet run: the loop's one signature, as every caller builds its records."""
    from prefixscope.analysis.fleet.run import Engine, Fleet, Traffic, simulate_fleet
    from prefixscope.analysis.fleet.stepcost import StepCost
    from prefixscope.analysis.trace.csr import build_trace

    trace = build_trace([[1, 2], [1, 3], [4]], [4, 4, 2], ["a", "b", "a"], 2, [0.0, 0.5, 1.0])
    cost = StepCost(a=0.01, b=0.0, c=0.0, e=0.0, f=0.0, k1=1.0, k2=1.0, source="warm-up")
    simulate_fleet(trace, Traffic(np.array([2, 1, 1])), Fleet("round-robin", 2, 8), Engine(cost))


_RUNNING: list[subprocess.Popen] = []  # type: ignore[type-arg]
_FOLDERS: list[Path] = []  # the markers' folders this process made


def start() -> None:
    """The compile in a process of its own; its marker and pid go to the workers by ``ENV``."""
    marker = Path(tempfile.mkdtemp(prefix="prefixscope-warm-")) / "done"
    _FOLDERS.append(marker.parent)
    p = subprocess.Popen([sys.executable, "-m", "tests.warm_kernels", str(marker)], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _RUNNING.append(p)
    os.environ[ENV] = f"{marker}:{p.pid}"


def stop() -> None:
    """At the run's end: a compile no test waited for (a run of files that never call the
    loop) is not left running after it, and its marker's folder goes."""
    while _RUNNING:
        p = _RUNNING.pop()
        if p.poll() is None:
            p.terminate()
        p.wait()
    while _FOLDERS:  # the controller's only: the workers are done with it by now
        shutil.rmtree(_FOLDERS.pop(), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return False


def wait() -> None:
    """Until the run's compile has ended (or its process is gone); at once outside a run that
    started one. A test that runs a command in a process of its own (the demo's flow) waits
    first, so that the command loads the loop from the cache rather than compiling it beside
    the compile, on the same cores."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    marker, pid = spec.rsplit(":", 1)
    while not Path(marker).exists() and _alive(int(pid)):
        time.sleep(0.2)


def await_in_worker() -> None:
    """The loop's first call in this process waits until the compile has ended (or its process
    is gone), then loads the loop from numba's cache; a compile that failed costs only this
    process its own."""
    if not os.environ.get(ENV):
        return
    from prefixscope.analysis.fleet import _kernel

    compiled = _kernel.fleet

    def first_call(*args):  # type: ignore[no-untyped-def]
        _kernel.fleet = compiled
        wait()
        return compiled(*args)

    _kernel.fleet = first_call


if __name__ == "__main__":
    compile_fleet()
    Path(sys.argv[1]).write_text("compiled")

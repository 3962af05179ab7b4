"""Forked workers (``analysis/forked.py``) and the fan-out's memory check: results in order, an
item's error raised as it was, a worker killed mid-task retried on a fresh one, and a task that
kills every worker it lands on ended with one line, never a hang."""

from __future__ import annotations

import os
import platform
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from prefixscope import resources
from prefixscope.analysis import fanout
from prefixscope.analysis.forked import forked


def square_plus(shared: np.ndarray, item: int) -> int:
    return int(shared[item] ** 2) + os.getpid() * 0


def refuse_seven(shared: object, item: int) -> int:
    if item == 7:
        raise ValueError("item 7 is refused — give another")
    return item


def killed_once(shared: Path, item: int) -> int:
    """Kills its own worker the first time it meets item 3 (a marker file remembers)."""
    mark = shared / f"killed-{item}"
    if item == 3 and not mark.exists():
        mark.write_text("once")
        os.kill(os.getpid(), signal.SIGKILL)
    return item * 10


def killed_always(shared: object, item: int) -> int:
    if item == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return item


@pytest.mark.parametrize("workers", [2, 5])  # more workers than items per worker, and cores
def test_results_come_back_in_item_order(workers: int) -> None:
    data = np.arange(40)
    assert forked(square_plus, data, list(range(40)), workers) == [i * i for i in range(40)]


def test_an_items_error_is_raised_as_it_was() -> None:
    with pytest.raises(ValueError, match="item 7 is refused"):
        forked(refuse_seven, None, list(range(12)), 2)


def test_a_worker_killed_mid_task_costs_no_result(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with resources.running("plan-slo"):
        got = forked(killed_once, tmp_path, list(range(8)), 2)
    assert got == [i * 10 for i in range(8)]
    err = capsys.readouterr().err
    assert "plan-slo: a worker process was lost (killed by SIGKILL" in err
    assert "runs again on a fresh one, with 1 worker from now on" in err


def test_a_task_that_kills_every_worker_ends_with_one_line(capsys) -> None:  # noqa: ANN001
    with resources.running("simulate"), pytest.raises(resources.ResourceError) as caught:
        forked(killed_always, None, list(range(5)), 2)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("the simulate stage lost a worker process (killed by SIGKILL")
    assert "GiB of memory" in line and "--workers 1" in line and "--dask-address" in line


@pytest.mark.parametrize(
    ("available_gib", "item_gib", "workers", "expected", "said"),
    [
        (64.0, 1.0, 2, 2, False),  # room for both
        (10.0, 6.0, 2, 1, True),  # 8 GiB usable: one 6-GiB task at a time
        (10.0, 2.0, 8, 4, True),
        (1.0, 9.0, 2, 1, True),  # never fewer than one
        (1.0, 9.0, 1, 1, False),  # one asked: nothing to say
    ],
)
def test_a_fan_out_runs_no_more_workers_than_memory_holds(
    monkeypatch, capsys, available_gib, item_gib, workers, expected, said
) -> None:  # noqa: ANN001
    monkeypatch.setattr(resources, "available_bytes", lambda: int(available_gib * 2**30))
    got = fanout.fitting_workers(workers, int(item_gib * 2**30), items=100)
    assert got == expected
    err = capsys.readouterr().err
    assert (f"{expected} worker" in err and f"instead of {workers}" in err) is said
    assert len(err.splitlines()) == int(said)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)
def test_the_heap_a_step_freed_goes_back_to_the_system() -> None:
    """Arrays under glibc's mmap threshold live in the heap; freed, they stay resident until
    handed back (``resources.give_back_heap``, after every flow step and worker task)."""
    import psutil

    rss = psutil.Process().memory_info
    held = [np.ones(12_000) for _ in range(5_000)]  # 96 KB each, 480 MB in all
    kept = held[::50]  # a few survivors pin the heap's top, so no free at its end shrinks it
    del held
    before = rss().rss
    resources.give_back_heap()
    assert before - rss().rss > 300e6 and len(kept) == 100

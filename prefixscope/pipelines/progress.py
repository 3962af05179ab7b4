"""A run's progress on a terminal: one bar over its steps, on stderr, when stderr is a terminal;
nothing at all otherwise (logs, pipes, CI, scheduled runs). The bar goes away when the run ends,
so what the run prints after it stands alone."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol


class Step(Protocol):
    def __call__(self, name: str) -> None:
        """Mark the previous step done and ``name`` as the one running."""


@contextmanager
def steps(names: Sequence[str]) -> Iterator[Step]:
    """A bar of ``len(names)`` steps, advanced by calling the yielded function with each step's
    name as it starts."""
    if not sys.stderr.isatty():
        yield lambda name: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task(names[0] if names else "", total=len(names))
    started = False

    def step(name: str) -> None:
        nonlocal started
        if started:
            bar.advance(task)
        started = True
        bar.update(task, description=name)

    with bar:
        yield step

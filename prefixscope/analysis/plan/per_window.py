"""The fewest GPUs window by window (``plan --slo … --per-window``): what a perfect autoscaler
would run, beside the static fleet that holds the SLO in every window.

Each window of the trace (``windows.py``) is searched alone (``search.py``, the same space:
every deployment, router, DRAM tier and store, caching on and off): its answer is the cheapest
fleet that meets the SLO in that window. The warm-up rule is the windows' own: a window is
simulated after one window of the traffic logged before it, on the fleet sized for it, so the
caches and queues it starts with are those that fleet would have kept, as if the autoscaler
resized the fleet, and refilled any new replica's cache, at the window's start for free. What
this leaves out is the cost of resizing (starting replicas, their cold caches): the figure is a
lower bound, the GPU-hours no autoscaler can beat.

GPU-hours: each window's answer for its window's length (a window without requests is left out
of the windows and costs nothing), against the static answer's GPUs over every window from the
first to the last, the same span. A window where no fleet meets is counted at the static
answer's GPUs (no fleet searched is cheaper there).

The fleets a window simulates are its own (a fleet is simulated on one window and cached by what
the simulation depends on, ``probe.sim_key``), and the spans of a window are cut for it and
dropped after it, so what the sizing holds is one window's, whatever the trace's length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prefixscope.analysis.plan.held import Task, TaskRunner, combine
from prefixscope.analysis.plan.probe import Part, sim_key
from prefixscope.analysis.plan.search import Fleet, Group, Result, search
from prefixscope.analysis.plan.slo import Slo
from prefixscope.analysis.plan.windows import Window


@dataclass(frozen=True)
class Sized:
    """One group's (load scale, caching) answer in one window: the cheapest fleet that meets
    there, or None."""

    group: Group
    window: Window
    best: Fleet | None


def size_each_window(
    groups: Sequence[Group],
    slo: Slo,
    windows: Sequence[Window],
    run_tasks: TaskRunner,
    after_window: Callable[[], None] = lambda: None,
) -> list[Sized]:
    """Every group's answer in every window, each window searched alone (the module
    docstring). ``after_window``: called once a window is done (the caller drops its spans)."""
    out: list[Sized] = []
    for w in windows:
        parts: dict[tuple, Part] = {}

        def judged(probes: Sequence, w: Window = w, parts: dict = parts) -> list[Result]:
            todo: dict[tuple, Task] = {}
            for p in probes:
                key = sim_key(p)
                if key not in parts and key not in todo:
                    todo[key] = Task(p, (w.index,), (w.index,), True)
            for key, got in zip(todo, run_tasks(list(todo.values())), strict=True):
                parts[key] = got[0]
            return [combine(slo, p, [(w.index, parts[sim_key(p)])]) for p in probes]

        outcomes = search(groups, slo, judged)
        out += [Sized(o.group, w, o.best) for o in outcomes]
        after_window()
    return out


@dataclass(frozen=True)
class GpuHours:
    """One group's GPU-hours over the windows' span: sized window by window, and static."""

    group: Group
    # None: a window no fleet meets alone, and no static answer to count it at
    scaled: float | None
    static: float | None  # None: no static answer
    windows_unmet: int  # windows where no fleet searched meets (counted at the static answer)


def key(group: Group) -> tuple[float, bool]:
    """A group's key among the answers: its load scale and caching."""
    return group.load_scale, group.prefix_caching


def gpu_hours(
    sized: Sequence[Sized], static_gpus: dict[tuple[float, bool], int | None]
) -> list[GpuHours]:
    """Per group, the GPU-hours of its window-by-window answers against its static answer's
    (``static_gpus``, by :func:`key`: the group's static answer, None where none meets)."""
    out = []
    for k in dict.fromkeys(key(s.group) for s in sized):
        rows = [s for s in sized if key(s.group) == k]
        group, static = rows[0].group, static_gpus.get(k)
        scaled: float | None = 0.0
        unmet = 0
        for s in rows:
            hours = (s.window.end_s - s.window.start_s) / 3600.0
            gpus = s.best.gpus if s.best is not None else static
            unmet += s.best is None
            scaled = None if scaled is None or gpus is None else scaled + gpus * hours
        span = (rows[-1].window.end_s - rows[0].window.start_s) / 3600.0
        out.append(GpuHours(group, scaled, None if static is None else static * span, unmet))
    return out

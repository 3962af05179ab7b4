"""The SLO held in every window: the search runs on the busiest window, then its answer is
checked on the whole trace, window by window; where another window misses the SLO, the search
runs on it too, until the answer holds in every window.

1. Each group (load scale, caching on or off) is searched (``search.py``) with every fleet
   judged on the windows searched so far: at first the busiest alone (``windows.py``). A fleet
   meets when it meets in each of them; its figures are those of the window with the least
   slack, the one that binds.
2. The group's answer is then run over the whole trace, a run of consecutive windows at a time
   (each run after one window of warm-up, at most ``run_lookups`` lookups, so that what a run
   holds stays bounded whatever the trace's length), and judged in every window not searched.
3. A window it misses in joins the windows searched, and the group is searched again: every
   fleet already simulated on a window is found again (``Task`` results are kept by what the
   simulation depends on, ``probe.sim_key``), so only the new window's fleets run. It ends when
   the answer holds in every window, or when no fleet meets (nothing left to check).

A fleet that misses in one window of the search misses; the windows checked cannot make an
answer cheaper, only dearer. Where the trace is one window, it is the search of the whole trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from prefixscope.analysis.plan.probe import Part, sim_key
from prefixscope.analysis.plan.search import Group, Outcome, Probe, Result, search
from prefixscope.analysis.plan.slo import Slo
from prefixscope.analysis.plan.windows import Window

#: The most lookups one run of the check simulates (its windows and its warm-up): about 8 hours
#: of the generated week's traffic. What a worker holds grows with it: on the week, ``plan
#: --slo ttft-p95=5 --deployments h200x8 --model deepseek-v3 --workers 2`` peaked at 10.60 GB
#: with 20 M and 7.88 GB with 10 M, taking 158 s and 172 s (the warm-up windows repeat).
RUN_LOOKUPS = 12_000_000
#: The same under a KV pool (``vllm``, ``sglang``), whose replicas hold 20 bytes a block where
#: ``ideal``'s hold 8 (``fleet/_pool_state.py``): the flow's SLO plan on the week under ``vllm``
#: peaked at 14.08 GB with 12 M and 10.11 GB with 6 M, taking 304.6 s and 343.0 s, the same
#: answers (benchmarks/RESULTS.md). Only with caching on: with it off a pool keeps no node
#: per block (``fleet/_pool.py``), and its runs are ``ideal``'s length.
POOL_RUN_LOOKUPS = 6_000_000


@dataclass(frozen=True)
class Task:
    """Simulate ``probe`` over ``windows`` (consecutive indices of the trace's windows, from
    the first one's warm-up) and measure it in ``measured``. A search task is one window and may
    stop once missed; a check task is a run of windows and never stops."""

    probe: Probe
    windows: tuple[int, ...]
    measured: tuple[int, ...]
    search: bool


#: Runs tasks (here, or fanned out), a list of parts per task, one per measured window.
TaskRunner = Callable[[Sequence[Task]], list[list[Part]]]


@dataclass(frozen=True)
class Held:
    """One group's windows: those it was searched on (the busiest first), how many the answer
    was checked in (every window, once the search has an answer), and the window that binds the
    answer (the least slack over all of them; for a group with no answer, the closest fleet's
    binding window among those searched)."""

    searched: tuple[int, ...]
    checked: int
    bound: int | None


def hold(
    groups: Sequence[Group],
    slo: Slo,
    windows: Sequence[Window],
    start: Window,
    run_tasks: TaskRunner,
    lookups: Callable[[int, int], int],
    run_lookups: Callable[[Probe], int] = lambda _: RUN_LOOKUPS,
) -> tuple[list[Outcome], list[Held]]:
    """Every group's answer, held in every window (the module docstring). ``lookups(a, b)``:
    the lookups of requests ``a .. b - 1``, what a run of windows is bounded by;
    ``run_lookups(probe)``: the most a run of that answer's check holds."""
    searched: list[list[int]] = [[start.index] for _ in groups]
    parts: dict[tuple, Part] = {}

    def judged(probes: Sequence[Probe]) -> list[Result]:
        todo: dict[tuple, Task] = {}
        for p in probes:
            for w in searched[p.group]:
                key = (sim_key(p), w)
                if key not in parts and key not in todo:
                    todo[key] = Task(p, (w,), (w,), True)
        for key, got in zip(todo, run_tasks(list(todo.values())), strict=True):
            parts[key] = got[0]
        return [combine(slo, p, [(w, parts[(sim_key(p), w)]) for w in searched[p.group]])
                for p in probes]  # fmt: skip

    while True:
        outcomes = search(groups, slo, judged)
        tasks: list[tuple[int, Task]] = []
        for gi, o in enumerate(outcomes):
            if o.best is not None:
                longest = run_lookups(o.best.probe)
                tasks += [(gi, t) for t in check_tasks(o.best.probe, windows, searched[gi],
                                                       lookups, longest)]  # fmt: skip
        results = run_tasks([t for _, t in tasks]) if tasks else []
        for (_, t), got in zip(tasks, results, strict=True):
            for w, part in zip(t.measured, got, strict=True):
                parts[(sim_key(t.probe), w)] = part
        missed = False
        for gi, o in enumerate(outcomes):
            if o.best is None:
                continue
            key = sim_key(o.best.probe)
            more = [w.index for w in windows if w.index not in searched[gi]
                    and not slo.meets(parts[(key, w.index)].metrics)]  # fmt: skip
            if more:
                searched[gi] += more
                missed = True
        if not missed:
            break
    outcomes = [_closest_in_full(o, slo, searched[i], parts, run_tasks)
                for i, o in enumerate(outcomes)]  # fmt: skip
    held = []
    for gi, o in enumerate(outcomes):
        if o.best is not None:
            key = sim_key(o.best.probe)
            every = [(w.index, parts[(key, w.index)]) for w in windows]
            bound = combine(slo, o.best.probe, every).window
            held.append(Held(tuple(searched[gi]), len(windows), bound))
        else:
            bound = o.closest.result.window if o.closest is not None else None
            held.append(Held(tuple(searched[gi]), 0, bound))
    return outcomes, held


def _closest_in_full(
    o: Outcome, slo: Slo, searched: Sequence[int], parts: dict[tuple, Part], run_tasks: TaskRunner
) -> Outcome:
    """A group with no answer: its closest fleet, where its run stopped once missed (its figures
    only bounds), run again in full on the windows searched, so that what is said of it is its
    own."""
    c = o.closest
    if o.best is not None or c is None or not c.result.stopped:
        return o
    key = sim_key(c.probe)
    for w, got in zip(searched, run_tasks([Task(c.probe, (w,), (w,), False) for w in searched]),
                      strict=True):  # fmt: skip
        parts[(key, w)] = got[0]
    result = combine(slo, c.probe, [(w, parts[(key, w)]) for w in searched])
    full = replace(c, result=result, binding=slo.binding(result.metrics))
    return replace(o, closest=full, fleets=tuple(full if f is c else f for f in o.fleets))


def combine(slo: Slo, probe: Probe, parts: Sequence[tuple[int, Part]]) -> Result:
    """A fleet over windows: the token hit rate over all of them; the metrics of the one with
    the least slack (the first among equals)."""
    hit = sum(p.hit_tokens for _, p in parts)
    total = sum(p.input_tokens for _, p in parts)
    window, part = min(parts, key=lambda wp: min(slo.slack(wp[1].metrics).values()))
    return Result(hit / total if total else 0.0, part.metrics, window, part.stopped)


def check_tasks(
    probe: Probe,
    windows: Sequence[Window],
    searched: Sequence[int],
    lookups: Callable[[int, int], int],
    run_lookups: int,
) -> list[Task]:
    """The answer over the whole trace: runs of consecutive windows of at most ``run_lookups``
    lookups with the first one's warm-up (a window alone when it holds more), each measured in
    its windows not searched; a run with none of those is left out."""
    tasks: list[Task] = []
    run: list[Window] = []
    for w in windows:
        if run and lookups(run[0].warm, w.end) > run_lookups:
            tasks.append(_task(probe, run, searched))
            run = []
        run.append(w)
    if run:
        tasks.append(_task(probe, run, searched))
    return [t for t in tasks if t.measured]


def _task(probe: Probe, run: list[Window], searched: Sequence[int]) -> Task:
    ids = tuple(w.index for w in run)
    return Task(probe, ids, tuple(i for i in ids if i not in searched), False)

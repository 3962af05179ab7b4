"""One fleet of the SLO search on one window, or on a run of windows, simulated (a task: it
runs here, on a forked worker or on a Dask worker).

The fleet is the ``fleet`` command's (``analysis/fleet/run.py``): ``Fleet`` at its defaults
but for the router, the replica count, the KV pool as capacity, the load scale, the tiers and
prefix caching; with caching off it runs on a trace whose blocks never repeat (``nocache.py``),
and a KV pool keeps no cache at all (``fleet/_pool.py``). A window
runs on its own span of the trace, its warm-up first (``windows.py``); its metrics are over
its own requests.

A search probe stops once a TTFT target is missed for sure in its window (``fleet/run.py``,
``Stop``): it then misses, and its figures are lower bounds (``Part.stopped``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.fleet.run import Fleet, Stop, Traffic, simulate_fleet
from prefixscope.analysis.plan.search import Probe
from prefixscope.analysis.plan.slo import Slo, allowed_exceeding, measure
from prefixscope.analysis.plan.windows import Window
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.tail import span


@dataclass(frozen=True)
class Part:
    """One fleet on one window: its requests' hit and input tokens and the SLO's metrics over
    them. ``stopped``: the run stopped once a TTFT target was missed for sure, so the fleet
    misses in this window and its figures are lower bounds (requests still waiting count their
    wait so far, requests not yet arrived count nothing)."""

    hit_tokens: int
    input_tokens: int
    metrics: dict[str, float]
    stopped: bool = False


@dataclass(frozen=True, eq=False)
class Shared:
    """What every fleet of a search reads: the trace and its traffic, the SLO, the engine, the
    windows, and the spans of the windows being searched (window index, prefix caching) →
    (trace, traffic), cut once before the workers start. Shipped to each worker once. On a
    Dask cluster a task carries its own span instead (the run's under :func:`run_key`), and
    the trace stays here (None there)."""

    trace: Trace | None
    traffic: Traffic | None
    slo: Slo
    engine: str = "ideal"
    windows: tuple[Window, ...] = ()
    spans: dict[tuple, tuple[Trace, Traffic]] | None = None


def fleet_of(probe: Probe, engine: str = "ideal") -> Fleet:
    s = probe.series
    return Fleet(
        router=s.router,
        replicas=probe.replicas,
        capacity_blocks=s.replica.kv_pool_blocks,
        load_scale=probe.load_scale,
        tiers=s.tiers,
        engine=engine,
        prefix_caching=probe.prefix_caching,
    )


def sim_key(probe: Probe) -> tuple:
    """What a probe's simulation depends on: two probes with one key simulate alike, whatever
    their price (one replica routes every request to itself, whatever the router)."""
    s = probe.series
    router = s.router if probe.replicas > 1 else "-"
    return (s.replica.deployment, router, probe.replicas, s.tiers, probe.load_scale,
            probe.prefix_caching)  # fmt: skip


def cut(
    trace: Trace, traffic: Traffic, first: int, end: int, caching: bool
) -> tuple[Trace, Traffic]:
    """Requests ``first .. end - 1`` as a trace of their own (caching off: no block repeats,
    ``nocache.py``)."""
    part = span(trace, first, end, fresh=not caching).warm()
    if first == 0 and end == trace.n_requests:
        return part, traffic
    return part, traffic.take(np.arange(first, end))


def spans_for(
    trace: Trace, traffic: Traffic, windows: Sequence[Window], caching: Sequence[bool]
) -> dict[tuple[int, bool], tuple[Trace, Traffic]]:
    """The span of each window (its warm-up and its requests), caching on and off as asked."""
    return {(w.index, c): cut(trace, traffic, w.warm, w.end, c) for w in windows for c in caching}


def run_key(windows: Sequence[Window], run: Sequence[int], probe: Probe) -> tuple:
    """The key of a run's span among ``Shared.spans``: its first and last request, caching."""
    return ("run", windows[run[0]].warm, windows[run[-1]].end, probe.prefix_caching)


def simulate_window(shared: Shared, probe: Probe, window: int) -> Part:
    """The probe's fleet on window ``window``, after its warm-up, stopping once missed."""
    w = shared.windows[window]
    key = (w.index, probe.prefix_caching)
    found = shared.spans.get(key) if shared.spans else None
    trace, traffic = found or cut(shared.trace, shared.traffic, w.warm, w.end, probe.prefix_caching)
    first = w.first - w.warm
    stop = Stop(first, tuple(
        (t.limit_s, allowed_exceeding(w.requests, t.percentile))
        for t in shared.slo.targets if t.metric == "ttft"
    ))  # fmt: skip
    return _parts(shared.slo, trace, traffic, probe, shared.engine, [(w, first)], stop)[0]


def simulate_run(
    shared: Shared, probe: Probe, windows: Sequence[int], measured: Sequence[int]
) -> list[Part]:
    """The probe's fleet on consecutive ``windows`` in one run, from the first one's warm-up:
    a part per window of ``measured`` (the check of an answer over the whole trace, a run of
    windows at a time); it never stops early."""
    first, last = shared.windows[windows[0]], shared.windows[windows[-1]]
    lo, hi = first.warm, last.end
    found = shared.spans.get(run_key(shared.windows, windows, probe)) if shared.spans else None
    trace, traffic = found or cut(shared.trace, shared.traffic, lo, hi, probe.prefix_caching)
    ws = [shared.windows[i] for i in measured]
    return _parts(shared.slo, trace, traffic, probe, shared.engine,
                  [(w, w.first - lo) for w in ws], None)  # fmt: skip


def _parts(
    slo: Slo,
    trace: Trace,
    traffic: Traffic,
    probe: Probe,
    engine: str,
    measured: Sequence[tuple[Window, int]],
    stop: Stop | None,
) -> list[Part]:
    o = simulate_fleet(trace, traffic, fleet_of(probe, engine), probe.series.replica.engine,
                       stop=stop)  # fmt: skip
    out = np.asarray(traffic.output_tokens, np.int64)
    ttft = o.ttft
    stopped = o.stopped_at >= 0
    if stopped:  # still waiting at the stop: at least the wait so far; not arrived: unknown
        ttft = ttft.copy()
        at = o.stopped_at
        waiting = np.flatnonzero(ttft[:at] == 0)
        ttft[waiting] = o.arrival[at] - o.arrival[waiting]
    parts = []
    for w, first in measured:
        end = first + w.requests
        arrived = min(end, o.stopped_at) if stopped else end  # hit rate: over those simulated
        metrics = measure(slo, ttft[first:end], o.arrival[first:end], o.done_at[first:end],
                          out[first:end])  # fmt: skip
        parts.append(
            Part(
                int(o.hit_tokens[first:arrived].sum()),
                int(trace.input_tokens[first:arrived].sum()),
                metrics,
                stopped,
            )
        )
    return parts

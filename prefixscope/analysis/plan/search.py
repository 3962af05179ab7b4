"""The SLO search: for each load scale, with prefix caching on and off, the cheapest fleet of
the searched space (``space.py``) that meets every target of the SLO (``slo.py``).

Per series (one deployment, router, DRAM tier and store), the replica count is searched by
galloping then bisection, which relies on one property: **a series that meets the SLO at n
replicas meets it at every count above n** (more replicas, less queueing: TTFT percentiles fall
as replicas are added). Galloping probes 1, 2, 4, … until a count meets; bisection then
narrows the bracket (the largest count known to miss, the smallest known to meet) to adjacent
counts, so the answer's neighbour below it was simulated and missed. The property is checked
on every series afterwards, on the counts simulated: a count that misses above one that meets
is counted in ``non_monotone`` and said in the answer.

**Dominance.** Let ``best`` be the cheapest fleet found so far that meets the SLO (at this load,
caching on or off). A series' *cap* is its largest replica count that costs at most ``best``:
no count above it can be the answer. A series is dropped, as dominated, when its cap is at or
below the largest count known to miss: every count it could still win at misses (by the
property above). A series whose cap is 0 (one replica costs more than ``best``: e.g. a
deployment dearer per replica than a fleet that met the SLO at one replica, or a tier that adds
more than it could save) is dropped without a simulation. Series are met cheapest per replica
first, so ``best`` falls early.

Series without a DRAM tier or store run first, as one wave; the series with tiers, each dearer
per replica than its untiered twin, start once that wave has ended, with ``best`` known: each
first simulates its cap (can it beat ``best`` at all?) and is dropped when that misses. Where
the first wave met the SLO nowhere, the cap is ``MAX_REPLICAS``, and a series that misses
there misses everywhere: one fleet ends it.

The search runs in rounds: each round every live series proposes its next count, the round's
fleets run together (here, or as tasks on a Dask cluster, ``analysis/fanout.py``), and the
results update each series and ``best``. The rounds do not depend on where fleets ran, so a
cluster's answer is the in-process one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prefixscope.analysis.fleet.run import MAX_REPLICAS
from prefixscope.analysis.plan.slo import Slo
from prefixscope.analysis.plan.space import Series

#: Tolerance on equal costs, $ per hour.
EPS_USD = 1e-9


@dataclass(frozen=True)
class Probe:
    """One fleet to simulate: a series at a replica count, at a load scale, caching on/off."""

    group: int
    series: Series
    replicas: int
    load_scale: float
    prefix_caching: bool


@dataclass(frozen=True)
class Result:
    """What one fleet measured over the windows searched: the token hit rate over them, and
    every metric ``slo.measure`` gives in ``window``, the one with the least slack (the one
    that binds). ``stopped``: that window's run stopped once a TTFT target was missed for sure,
    so its figures are lower bounds."""

    token_hit_rate: float
    metrics: dict[str, float]
    window: int = 0
    stopped: bool = False


@dataclass(frozen=True)
class Fleet:
    """A simulated fleet and its verdict."""

    probe: Probe
    result: Result
    meets: bool
    binding: str
    usd_per_hour: float

    @property
    def gpus(self) -> int:
        return self.probe.series.gpus(self.probe.replicas)


@dataclass
class _State:
    series: Series
    lo: int = 0  # the largest count simulated that misses (0: none)
    hi: int | None = None  # the smallest count simulated that meets
    done: str | None = None  # why the series ended: answered, dominated, never
    seen: dict[int, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    """One search: every series at one load scale, caching on or off."""

    load_scale: float
    prefix_caching: bool
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Outcome:
    """One group's answer: the fleets simulated (in the order they ran), the cheapest that
    meets (None: none does) or else the closest, and what the search skipped."""

    group: Group
    fleets: tuple[Fleet, ...]
    best: Fleet | None
    closest: Fleet | None
    dominated_unsimulated: int  # series dropped before any simulation
    dominated_later: int  # series dropped after some
    never_met: int  # series that miss at MAX_REPLICAS (or at their cap)
    non_monotone: int  # series where a count misses above one that meets


Runner = Callable[[Sequence[Probe]], list[Result]]


def search(groups: Sequence[Group], slo: Slo, run: Runner) -> list[Outcome]:
    """Every group's answer (the module docstring), ``run`` simulating each round's fleets."""
    states = [[_State(s) for s in g.series] for g in groups]
    fleets: list[list[Fleet]] = [[] for _ in groups]
    best: list[Fleet | None] = [None for _ in groups]
    while True:
        probes = []
        for gi, g in enumerate(groups):
            probes += _round(states[gi], gi, g, best[gi])
        if not probes:
            break
        results = run([p for _, p in probes])
        for (st, p), r in zip(probes, results, strict=True):
            f = Fleet(p, r, slo.meets(r.metrics), slo.binding(r.metrics),
                      p.series.usd_per_hour(p.replicas))  # fmt: skip
            fleets[p.group].append(f)
            st.seen[p.replicas] = f.meets
            if f.meets:
                st.hi = p.replicas if st.hi is None else min(st.hi, p.replicas)
                b = best[p.group]
                if b is None or _order(f) < _order(b):
                    best[p.group] = f
            else:
                st.lo = max(st.lo, p.replicas)
    return [_outcome(g, states[i], fleets[i], best[i], slo) for i, g in enumerate(groups)]


def _round(states: list[_State], gi: int, g: Group, best: Fleet | None) -> list:
    """The group's next fleets: every live series of the first wave not yet ended proposes
    one (a wave whose series all end without a proposal lets the next one propose)."""
    while True:
        live = [st for st in states if st.done is None]
        if not live:
            return []
        wave = min(_wave(st.series) for st in live)
        out = []
        for st in live:
            if _wave(st.series) == wave:
                n = _next(st, _cap(st.series, best), first_at_cap=wave > 0)
                if n is not None:
                    out.append((st, Probe(gi, st.series, n, g.load_scale, g.prefix_caching)))
        if out:
            return out


def _cap(s: Series, best: Fleet | None) -> int:
    """The largest replica count of ``s`` that costs at most ``best`` (MAX_REPLICAS when
    nothing meets yet)."""
    if best is None:
        return MAX_REPLICAS
    n = MAX_REPLICAS
    while n > 0 and s.usd_per_hour(n) > best.usd_per_hour + EPS_USD:
        n -= 1
    return n


def _next(st: _State, cap: int, first_at_cap: bool = False) -> int | None:
    """The next count to simulate, or None (the series ends, ``st.done`` says why).
    ``first_at_cap``: a series' first fleet is its cap (the second wave's)."""
    if st.done is not None:
        return None
    if st.hi is not None and st.hi <= cap:
        if st.hi - st.lo <= 1:
            st.done = "answered"
            return None
        return (st.lo + st.hi) // 2
    if cap <= st.lo:
        st.done = "dominated" if cap < MAX_REPLICAS or st.hi is not None else "never"
        if st.done == "dominated" and not st.seen:
            st.done = "dominated-unsimulated"
        return None
    if st.hi is not None or (st.lo == 0 and (cap < MAX_REPLICAS or first_at_cap)):
        return cap  # can it beat the best at all? one fleet says (misses: dominated, or never)
    return min(cap, max(1, 2 * st.lo))


def _wave(s: Series) -> int:
    """Series without tiers run first (their answers cap the rest), then those with."""
    return 0 if not s.dram_gib and s.store_gib is None else 1


def _order(f: Fleet) -> tuple:
    """Cheapest first; then the lower TTFT p95, then fewer GPUs, then the series' name."""
    return (
        round(f.usd_per_hour, 9),
        f.result.metrics["ttft-p95"],
        f.gpus,
        str(f.probe.series.key),
    )


def _outcome(
    g: Group, states: list[_State], fleets: list[Fleet], best: Fleet | None, slo: Slo
) -> Outcome:
    closest = None
    if best is None and fleets:  # the least missed: the greatest least slack, then cheapest;
        # a fleet whose run stopped once missed has a slack that is only a bound: after those
        # that ran in full
        closest = max(
            fleets,
            key=lambda f: (
                not f.result.stopped,
                min(slo.slack(f.result.metrics).values()),
                -f.usd_per_hour,
            ),
        )
    non_monotone = sum(_non_monotone(st.seen) for st in states)
    done = [st.done for st in states]
    return Outcome(
        group=g,
        fleets=tuple(fleets),
        best=best,
        closest=closest,
        dominated_unsimulated=done.count("dominated-unsimulated"),
        dominated_later=done.count("dominated"),
        never_met=done.count("never"),
        non_monotone=non_monotone,
    )


def _non_monotone(seen: dict[int, bool]) -> bool:
    """Whether a count simulated misses above one that meets."""
    met = [n for n, m in seen.items() if m]
    missed = [n for n, m in seen.items() if not m]
    return bool(met and missed and max(missed) > min(met))

"""One fleet of the SLO search, simulated (a task: it runs here or on a Dask worker).

The fleet is the ``fleet`` command's (``analysis/fleet/run.py``): ``Fleet`` at its defaults
but for the router, the replica count, the KV pool as capacity, the load scale and the tiers;
with prefix caching off it runs on the trace whose blocks never repeat (``nocache.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from prefixscope.analysis.fleet.run import Fleet, Traffic, simulate_fleet
from prefixscope.analysis.plan.search import Probe, Result
from prefixscope.analysis.plan.slo import Slo, measure
from prefixscope.analysis.trace.csr import Trace

#: Whether this version's ``Fleet`` names the engine whose KV pool it runs (``ideal`` when
#: not: one cache beside the running requests).
HAS_ENGINE = any(f.name == "engine" for f in fields(Fleet))


@dataclass(frozen=True, eq=False)
class Shared:
    """What every fleet of a search reads: the trace, the same with caching off, the traffic
    and the SLO (shipped to each worker once)."""

    trace: Trace
    fresh: Trace
    traffic: Traffic
    slo: Slo
    engine: str = "ideal"


def fleet_of(probe: Probe, engine: str = "ideal") -> Fleet:
    s = probe.series
    extra = {"engine": engine} if HAS_ENGINE else {}
    return Fleet(
        router=s.router,
        replicas=probe.replicas,
        capacity_blocks=s.replica.kv_pool_blocks,
        load_scale=probe.load_scale,
        tiers=s.tiers,
        **extra,
    )


def simulate_probe(shared: Shared, probe: Probe) -> Result:
    """The probe's fleet over the whole trace: its token hit rate and the SLO's metrics."""
    trace = shared.trace if probe.prefix_caching else shared.fresh
    fleet = fleet_of(probe, shared.engine)
    o = simulate_fleet(trace, shared.traffic, fleet, probe.series.replica.engine)
    out = np.asarray(shared.traffic.output_tokens, np.int64)
    metrics = measure(shared.slo, o.ttft, o.arrival, o.done_at, out)
    total = int(trace.input_tokens.sum())
    rate = float(o.hit_tokens.sum()) / total if total else 0.0
    return Result(rate, metrics)

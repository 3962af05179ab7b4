"""The SLO planner's disaggregated answer: the fewest GPUs of one deployment, split into a
prefill pool and a decode pool (``fleet/disagg.py``), that meet the SLO, beside the colocated
answer (docs/plan.md, "Disaggregated fleets").

The search runs on the busiest window (``windows.py``; its warm-up simulated, not measured),
with the prefix cache on, at one load scale; the answer is not re-checked in the other
windows, where the colocated answer is (the table says so in ``windows_checked``).

- **The prefill pool's floor.** A disaggregated request's TTFT is at least its prefill
  replica's (the KV's move and the decode side's wait only add), so the prefill pool is
  searched first: ``P`` grows from 1 until the prefill pool alone meets every TTFT target
  (``P_min``; 1 when the SLO names none). Fewer prefill replicas never meet.
- **The split.** Then the total ``T`` grows from ``P_min + 1``; at each ``T`` every split
  ``P + D = T`` with ``P ≥ P_min`` and ``D ≥ 1`` is simulated, and the first ``T`` where
  one meets is the answer (the split with the most slack among those that meet). No ``T``
  below it met, so the answer is the fewest replicas of the deployment.
- The prefill pool keeps the colocated answer's router, DRAM tier and store: the prefix
  cache lives there.
- The search stops at :data:`MAX_TOTAL` replicas, or at twice the colocated answer's and two
  more: beyond that the colocated fleet wins anyway, and the row says none was found there.

A request larger than a decode replica's pool is never served: a fleet that refuses one
misses (its binding target is ``refused``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from prefixscope.analysis.cost.models import GIB
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.fleet.decode_pool import DecodePool, decode
from prefixscope.analysis.fleet.disagg import Link, prefill_only, transfer_seconds
from prefixscope.analysis.fleet.run import Fleet, FleetOutcome, Tiers, Traffic, simulate_fleet
from prefixscope.analysis.plan.probe import cut
from prefixscope.analysis.plan.slo import Slo, measure
from prefixscope.analysis.plan.space import GB, Replica
from prefixscope.analysis.plan.windows import Window
from prefixscope.analysis.trace.csr import Trace

#: The most replicas (prefill and decode together) the search tries.
MAX_TOTAL = 32

PLAN_SLO_DISAGG_SCHEMA = pa.schema(
    [
        ("load_scale", pa.float64()),
        ("slo", pa.string()),
        ("deployment", pa.string()),
        ("router", pa.string()),
        ("link", pa.string()),
        ("link_gbps", pa.float64()),
        ("met", pa.bool_()),
        ("prefill_replicas", pa.int32()),
        ("decode_replicas", pa.int32()),
        ("gpus", pa.int32()),
        ("usd_per_hour", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("tpot_p95_s", pa.float64()),
        ("binding", pa.string()),
        ("token_hit_rate", pa.float64()),
        ("fleets_searched", pa.int64()),
        ("max_replicas_searched", pa.int32()),
        ("window_start_s", pa.float64()),
        ("window_end_s", pa.float64()),
        ("colocated_gpus", pa.int32()),
        ("gpus_fewer_than_colocated", pa.int32()),
        ("cost_model", pa.string()),
    ]
)


@dataclass(frozen=True)
class Tried:
    """One disaggregated fleet on the window: its split, its metrics and verdict."""

    prefill: int
    decode: int
    metrics: dict[str, float]
    meets: bool
    binding: str
    hit_rate: float


@dataclass(frozen=True, eq=False)
class Span:
    """The window's span of the trace (its warm-up first) and what is measured in it."""

    trace: Trace
    traffic: Traffic
    measured: slice

    @classmethod
    def of(cls, trace: Trace, traffic: Traffic, window: Window) -> Span:
        sub, sub_traffic = cut(trace, traffic, window.warm, window.end, True)
        return cls(sub, sub_traffic, slice(window.first - window.warm, None))


def _slack(slo: Slo, metrics: dict[str, float]) -> float:
    return min(slo.slack(metrics).values())


def search_disagg(
    span: Span,
    replica: Replica,
    slo: Slo,
    router: str,
    engine: str,
    link: Link,
    load_scale: float,
    colocated_replicas: int | None,
    tiers: Tiers | None = None,
) -> tuple[Tried | None, list[Tried], int]:
    """The answer (None: none within the bound), every fleet tried, and the bound on total
    replicas (the module docstring). ``tiers``: each prefill replica's DRAM tier and the
    prefill pool's store, as the colocated answer has them."""
    bound = MAX_TOTAL
    if colocated_replicas is not None:
        bound = min(bound, 2 * colocated_replicas + 2)
    trace, traffic, m = span.trace, span.traffic, span.measured
    outputs = np.asarray(traffic.output_tokens, np.int64)
    move = transfer_seconds(trace.input_tokens, replica.kv_bytes_per_gpu_token, link)
    prefill: dict[int, FleetOutcome] = {}

    def pre(p: int) -> FleetOutcome:
        if p not in prefill:
            fleet = Fleet(router, p, replica.kv_pool_blocks, load_scale=load_scale,
                          tiers=tiers or Tiers(), engine=engine)  # fmt: skip
            prefill[p] = simulate_fleet(trace, prefill_only(traffic), fleet, replica.engine)
        return prefill[p]

    def hit_rate(o: FleetOutcome) -> float:
        total = float(trace.input_tokens[m].sum())
        return float(o.hit_tokens[m].sum()) / total if total else 0.0

    tried: list[Tried] = []
    ttft_targets = Slo(tuple(t for t in slo.targets if t.metric == "ttft"))
    p_min = 1
    if ttft_targets.targets:
        while p_min < bound:
            o = pre(p_min)
            values = measure(ttft_targets, o.ttft[m], o.arrival[m], o.done_at[m], outputs[m])
            if ttft_targets.meets(values):
                break
            p_min += 1
    for total in range(p_min + 1, bound + 1):
        met: list[Tried] = []
        for p in range(p_min, total):
            d = total - p
            o = pre(p)
            pool = DecodePool(d, replica.kv_pool_blocks, trace.block_size, replica.engine.cost,
                              replica.engine.max_seqs)  # fmt: skip
            dec = decode(o.arrival + o.ttft, move, trace.input_tokens, outputs, pool)
            ttft = dec.landed_at - o.arrival
            if dec.refused[m].any():
                t = Tried(p, d, {}, False, "refused", hit_rate(o))
            else:
                values = measure(slo, ttft[m], o.arrival[m], dec.done_at[m], outputs[m])
                t = Tried(p, d, values, slo.meets(values), slo.binding(values), hit_rate(o))
            tried.append(t)
            if t.meets:
                met.append(t)
        if met:
            return max(met, key=lambda t: _slack(slo, t.metrics)), tried, bound
    return None, tried, bound


def disagg_row(
    answer: Tried | None,
    tried: list[Tried],
    bound: int,
    *,
    replica: Replica,
    slo: Slo,
    router: str,
    link: Link,
    load_scale: float,
    window: Window,
    colocated_gpus: int | None,
    prices: Prices,
    cost_model: str,
    tiers: Tiers | None = None,
) -> dict:
    """The ``plan_slo_disagg`` row: the answer, else the closest fleet tried (the greatest
    least slack), which is no answer. Its price: every GPU, the prefill replicas' DRAM tiers
    and the store (``tiers``, as :func:`search_disagg` ran them)."""
    shown = answer
    if shown is None:
        scored = [t for t in tried if t.metrics]
        shown = max(scored, key=lambda t: _slack(slo, t.metrics)) if scored else None
    gpus = None if shown is None else (shown.prefill + shown.decode) * replica.tp
    usd = None
    if shown is not None:
        t = tiers or Tiers()
        dram_gb, store_gb = (t.dram_gib or 0.0) * GIB / GB, (t.store_gib or 0.0) * GIB / GB
        usd = prices.per_hour(shown.prefill, dram_gb, store_gb, replica.tp, replica.gpu_spec)
        usd += prices.per_hour(shown.decode, 0.0, 0.0, replica.tp, replica.gpu_spec)
    fewer = None
    if answer is not None and colocated_gpus is not None and gpus is not None:
        fewer = colocated_gpus - gpus
    metrics = shown.metrics if shown is not None else {}
    return {
        "load_scale": load_scale,
        "slo": slo.text,
        "deployment": replica.deployment,
        "router": router,
        "link": link.name,
        "link_gbps": None if math.isinf(link.gbps) else link.gbps,
        "met": answer is not None,
        "prefill_replicas": None if shown is None else shown.prefill,
        "decode_replicas": None if shown is None else shown.decode,
        "gpus": gpus,
        "usd_per_hour": usd,
        "ttft_p95_s": metrics.get("ttft-p95"),
        "tpot_p95_s": metrics.get("tpot-p95"),
        "binding": None if shown is None else shown.binding,
        "token_hit_rate": None if shown is None else shown.hit_rate,
        "fleets_searched": len(tried),
        "max_replicas_searched": bound,
        "window_start_s": window.start_s,
        "window_end_s": window.end_s,
        "colocated_gpus": colocated_gpus,
        "gpus_fewer_than_colocated": fewer,
        "cost_model": cost_model,
    }


def table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=PLAN_SLO_DISAGG_SCHEMA)

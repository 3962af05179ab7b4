"""The tables a fleet simulation writes (``fleet_hit_rates``, ``fleet_replicas``;
docs/schema.md): Arrow schemas, and the rows of a run's outcomes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from prefixscope.analysis.cost.models import GIB
from prefixscope.analysis.cost.prices import GPU_SECONDS, Prices
from prefixscope.analysis.fleet.hardware import Hardware
from prefixscope.analysis.fleet.run import UNBOUNDED, FleetOutcome, Tiers
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import FLEET, trace_index_groups
from prefixscope.analysis.trace.steady import WarmUp, warm_up
from prefixscope.analysis.trace.windows import STEADY, WINDOWS

#: What each replica's deployment holds (``hardware.py``): last, as the SQL tables added them.
DEPLOYMENT_FIELDS = [
    ("deployment", pa.string()),
    ("gpus", pa.int32()),
    ("kv_pool_blocks", pa.int64()),
    ("weights_gib", pa.float64()),
    ("reserve_gib", pa.float64()),
    ("kv_pool_gib", pa.float64()),
    ("exceeds_hbm", pa.bool_()),
]


#: The engine and what its KV pool did, per replica (``FleetOutcome``; time-weighted over the
#: steps): in ``fleet_hit_rates`` summed (preemptions) or averaged over the replicas.
ENGINE_FIELDS = [
    ("engine", pa.string()),
    ("preemptions", pa.int64()),
    ("running_blocks_mean", pa.float64()),
    ("running_blocks_p95", pa.float64()),
    ("prefix_cache_blocks_mean", pa.float64()),
]

#: Per tenant and window, the lookups after a preemption (pools), counted apart from the hit
#: rate as vLLM's ``preempted_*`` counters are: how many, tokens looked up, tokens found.
PREEMPTED_FIELDS = [
    ("preempted_lookups", pa.int64()),
    ("preempted_query_tokens", pa.int64()),
    ("preempted_hit_tokens", pa.int64()),
]

GB = 1e9  # tiers are priced per GB (``prices.py``), sized in GiB

#: What the GPU-seconds count and what they are worth (``Pricing``): the cache's saving in
#: dollars, the part the DRAM tier and the store served, and on the fleet's rows the tiers' own
#: price and the net.
DOLLAR_FIELDS = [
    ("gpu_seconds_unit", pa.string()),
    ("gpu_hour", pa.float64()),
    ("usd_saved_per_hour", pa.float64()),
    ("tier_usd_saved_per_hour", pa.float64()),
    ("tier_gib", pa.float64()),
    ("tier_usd_per_hour", pa.float64()),
    ("tier_net_usd_per_hour", pa.float64()),
]

FLEET_HIT_RATES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("router", pa.string()),
        ("replicas", pa.int32()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_gib", pa.float64()),
        ("policy", pa.string()),
        ("load_scale", pa.float64()),
        ("dram_blocks", pa.int64()),
        ("dram_gib", pa.float64()),
        ("dram_gbps", pa.float64()),
        ("store_blocks", pa.int64()),
        ("store_unbounded", pa.bool_()),
        ("store_gib", pa.float64()),
        ("store_gbps", pa.float64()),
        ("block_size", pa.int32()),
        ("model", pa.string()),
        ("gpu", pa.string()),
        ("cost_model", pa.string()),
        ("cost_model_run_id", pa.string()),
        ("measure_window", pa.string()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("hit_tokens_hbm", pa.int64()),
        ("hit_tokens_dram", pa.int64()),
        ("hit_tokens_store", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("ceiling_token_hit_rate", pa.float64()),
        ("traffic_seconds", pa.float64()),
        ("transfer_s", pa.float64()),
        ("prefill_gpu_seconds_no_cache", pa.float64()),
        ("prefill_gpu_seconds", pa.float64()),
        ("gpu_seconds_saved_hbm", pa.float64()),
        ("gpu_seconds_saved_dram", pa.float64()),
        ("gpu_seconds_saved_store", pa.float64()),
        ("gpu_seconds_saved_per_hour", pa.float64()),
        ("ttft_p50_s", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("ttft_p99_s", pa.float64()),
        ("ttft_mean_s", pa.float64()),
        ("load_imbalance", pa.float64()),
        ("prefill_imbalance", pa.float64()),
        ("warmup_requests", pa.int64()),
        ("steady", pa.bool_()),
        *DEPLOYMENT_FIELDS,
        *ENGINE_FIELDS,
        *PREEMPTED_FIELDS,
        *DOLLAR_FIELDS,
        ("router_delay_ms", pa.float64()),
        ("warm_start", pa.string()),
        ("warm_requests", pa.int64()),
    ]
)

FLEET_REPLICAS_SCHEMA = pa.schema(
    [
        ("router", pa.string()),
        ("replicas", pa.int32()),
        ("capacity_blocks", pa.int64()),
        ("policy", pa.string()),
        ("load_scale", pa.float64()),
        ("dram_blocks", pa.int64()),
        ("store_blocks", pa.int64()),
        ("store_unbounded", pa.bool_()),
        ("replica", pa.int32()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("prefill_tokens", pa.int64()),
        ("decode_tokens", pa.int64()),
        ("steps", pa.int64()),
        ("busy_s", pa.float64()),
        ("utilisation", pa.float64()),
        ("drained_s", pa.float64()),
        *DEPLOYMENT_FIELDS,
        *ENGINE_FIELDS,
        ("router_delay_ms", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Pricing:
    """What the rows say about the step cost: the model, the GPU, and where the cost came
    from (``calibrated`` with its replay run, or ``roofline``); and what a second of it is
    worth: ``gpus`` per replica, each busy for the replica's time (GPU-seconds are replica
    seconds × ``gpus``), at ``gpu_hour`` dollars an hour (None: no dollars), the tiers at
    ``prices``' GB-hour rates, a block of the replica's KV ``kv_bytes_per_token`` × block size
    (None: an unbounded store is not priced)."""

    model: str
    gpu: str
    cost_model: str
    cost_model_run_id: str | None = None
    gpus: int = 1
    gpu_hour: float | None = None
    prices: Prices = Prices()
    kv_bytes_per_token: float | None = None
    #: the step cost itself, where the rows price what-ifs with it (the miss budget's
    #: GPU-seconds); None: they are not priced
    step: StepCost | None = None

    def tier_gb(
        self, tiers: Tiers, replicas: int, block_size: int, distinct: int
    ) -> tuple[float, float] | None:
        """GB of the fleet's DRAM tiers (all ``replicas``) and of its store (an unbounded one
        at the ``distinct`` blocks of the trace, the most it holds); None where a tier's size
        in bytes is unknown."""
        block = None if self.kv_bytes_per_token is None else self.kv_bytes_per_token * block_size
        dram = _gb(tiers.dram_gib, tiers.dram_blocks, block) if tiers.dram_blocks else 0.0
        store: float | None = 0.0
        if tiers.store_blocks == UNBOUNDED:
            store = None if block is None else distinct * block / GB
        elif tiers.store_blocks is not None:
            store = _gb(tiers.store_gib, tiers.store_blocks, block)
        if dram is None or store is None:
            return None
        return replicas * dram, store

    def tier_usd_per_hour(self, gb: tuple[float, float] | None) -> float | None:
        """$ an hour of ``tier_gb``'s DRAM and store."""
        if gb is None:
            return None
        return self.prices.per_hour(1, gb[0], gb[1], gpus=0)  # the tiers alone, no GPU


def _gb(gib: float | None, blocks: int, block_bytes: float | None) -> float | None:
    """GB of a tier given in GiB, else of ``blocks`` blocks of ``block_bytes``."""
    if gib is not None:
        return gib * GIB / GB
    return None if block_bytes is None else blocks * block_bytes / GB


def own_warm_up(trace: Trace, o: FleetOutcome) -> WarmUp:
    """A configuration's warm-up: every serving replica's cache full, and MSER-5 over the
    fleet's hit rates (``trace/steady.py``)."""
    return warm_up(o.hit_tokens, trace.input_tokens, o.fleet_filled_at, True)


def shared_start(trace: Trace, outcomes: Sequence[FleetOutcome]) -> int:
    """The steady window of a fleet run starts at the latest warm-up end among its
    configurations that filled, as ``simulate``'s does for single caches."""
    ends = [w.end for w in (own_warm_up(trace, o) for o in outcomes) if w.filled]
    return max(ends) if ends else trace.n_requests


def window_groups(
    trace: Trace, windows: Sequence[str], start: int
) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Per window, its measured requests (the steady one from ``start``), the fleet then each
    tenant, as positions."""
    out = {}
    for window in windows:
        steady = window == STEADY
        measured = np.arange(trace.n_requests) >= start if steady else WINDOWS[window](trace)
        out[window] = trace_index_groups(trace, measured)
    return out


def _share(x: float, total: float) -> float | None:
    return x / total if total else None


def _imbalance(values: np.ndarray) -> float | None:
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.max()) / mean if mean > 0 else None


def hit_rate_rows(
    trace: Trace,
    o: FleetOutcome,
    ceiling: np.ndarray,
    windows: Sequence[str],
    start: int,
    pricing: Pricing,
    groups: dict[str, list[tuple[str, np.ndarray]]] | None = None,
    hardware: Hardware | None = None,
) -> list[dict]:
    """``fleet_hit_rates`` rows of one configuration: per window, the fleet then each tenant.
    ``ceiling``: the single unbounded cache's hit tokens per request; ``groups``: per window,
    its measured requests by group (:func:`window_groups`, found once for every
    configuration)."""
    groups = groups or window_groups(trace, windows, start)
    f = o.fleet
    t = f.tiers
    store = t.store_blocks is not None
    unbounded = store and t.store_blocks == UNBOUNDED
    base = {
        "router": f.router,
        "replicas": f.replicas,
        "capacity_blocks": f.capacity_blocks,
        "capacity_tokens": f.capacity_blocks * trace.block_size,
        "capacity_gib": f.capacity_gib,
        "policy": f.policy_label,
        "load_scale": f.load_scale,
        "dram_blocks": t.dram_blocks,
        "dram_gib": t.dram_gib if t.dram_blocks else None,
        "dram_gbps": t.dram_gbps if t.dram_blocks else None,
        "store_blocks": t.store_blocks if store and not unbounded else None,
        "store_unbounded": unbounded if store else None,
        "store_gib": t.store_gib if store else None,
        "store_gbps": t.store_gbps if store else None,
        "block_size": trace.block_size,
        "model": pricing.model,
        "gpu": pricing.gpu,
        "cost_model": pricing.cost_model,
        "cost_model_run_id": pricing.cost_model_run_id,
        "load_imbalance": _imbalance(o.busy),
        "prefill_imbalance": _imbalance(o.prefill_tokens.astype(np.float64)),
        **(hardware or Hardware()).columns(f.capacity_blocks),
        **engine_columns(o),
        "gpu_seconds_unit": GPU_SECONDS,
        "gpu_hour": pricing.gpu_hour,
    }
    per_gpu = pricing.gpus  # a replica's second busies every GPU of its deployment
    tier_gb = pricing.tier_gb(t, f.replicas, trace.block_size, trace.n_unique)
    tier_price = pricing.tier_usd_per_hour(tier_gb)
    rows = []
    filled = own_warm_up(trace, o).filled
    for window in windows:
        steady = window == STEADY
        reported = not steady or filled
        for name, mask in groups[window]:  # positions, not masks
            inp = int(trace.input_tokens[mask].sum())
            hit = int(o.hit_tokens[mask].sum())
            ttft = o.ttft[mask]
            some = len(ttft) > 0
            by_source = o.source_tokens[mask].sum(axis=0)
            saved = o.source_saved_s[mask].sum(axis=0) * per_gpu
            span = float(o.arrival[mask].max() - o.arrival[mask].min()) if some else 0.0
            no_cache = float(o.no_cache_s[mask].sum()) * per_gpu
            usd = _usd_per_hour(float(saved.sum()), span, pricing.gpu_hour)
            tier_usd = _usd_per_hour(float(saved[1] + saved[2]), span, pricing.gpu_hour)
            whole = name == FLEET  # the tiers are bought for the fleet, not for a tenant
            net = None if tier_usd is None or tier_price is None or not whole else (
                tier_usd - tier_price
            )  # fmt: skip
            p50, p95, p99 = np.percentile(ttft, [50, 95, 99]) if some else (None,) * 3
            rows.append(
                {
                    **base,
                    "tenant": name,
                    "measure_window": window,
                    "requests": len(mask),
                    "input_tokens": inp,
                    "hit_tokens": hit,
                    "hit_tokens_hbm": int(by_source[0]),
                    "hit_tokens_dram": int(by_source[1]),
                    "hit_tokens_store": int(by_source[2]),
                    "token_hit_rate": _share(hit, inp) if reported else None,
                    "traffic_seconds": span,
                    "transfer_s": float(o.transfer_s[mask].sum()),
                    "prefill_gpu_seconds_no_cache": no_cache,
                    "prefill_gpu_seconds": no_cache - float(saved.sum()),
                    "gpu_seconds_saved_hbm": float(saved[0]),
                    "gpu_seconds_saved_dram": float(saved[1]),
                    "gpu_seconds_saved_store": float(saved[2]),
                    "gpu_seconds_saved_per_hour": float(saved.sum()) * 3600 / span
                    if span > 0
                    else None,
                    "ceiling_token_hit_rate": _share(int(ceiling[mask].sum()), inp),
                    "ttft_p50_s": float(p50) if some else None,
                    "ttft_p95_s": float(p95) if some else None,
                    "ttft_p99_s": float(p99) if some else None,
                    "ttft_mean_s": float(ttft.mean()) if some else None,
                    "warmup_requests": start if steady else None,
                    "steady": reported if steady else None,
                    **dict(
                        zip(
                            [name for name, _ in PREEMPTED_FIELDS],
                            o.preempted[mask].sum(axis=0).tolist(),
                            strict=True,
                        )
                    ),
                    "usd_saved_per_hour": usd,
                    "tier_usd_saved_per_hour": tier_usd,
                    "tier_gib": None if tier_gb is None else sum(tier_gb) * GB / GIB,
                    "tier_usd_per_hour": tier_price if whole else None,
                    "tier_net_usd_per_hour": net,
                }
            )
    return rows


def _usd_per_hour(gpu_seconds: float, span: float, gpu_hour: float | None) -> float | None:
    """Dollars an hour of ``gpu_seconds`` over ``span`` seconds of traffic."""
    if gpu_hour is None or span <= 0:
        return None
    return gpu_seconds / span * gpu_hour


def replica_rows(trace: Trace, o: FleetOutcome, hardware: Hardware | None = None) -> list[dict]:
    """``fleet_replicas`` rows: one per replica, over every request routed to it."""
    f = o.fleet
    deployed = (hardware or Hardware()).columns(f.capacity_blocks)
    n = f.replicas
    requests = np.bincount(o.replica, minlength=n)
    inp = np.bincount(o.replica, weights=trace.input_tokens, minlength=n)
    hit = np.bincount(o.replica, weights=o.hit_tokens, minlength=n)
    span = float(o.drained_at.max() - o.arrival[0]) if len(o.arrival) else 0.0
    return [
        {
            "router": f.router,
            "replicas": n,
            "capacity_blocks": f.capacity_blocks,
            "policy": f.policy_label,
            "load_scale": f.load_scale,
            "dram_blocks": f.tiers.dram_blocks,
            "store_blocks": f.tiers.store_blocks
            if f.tiers.store_blocks not in (None, UNBOUNDED)
            else None,
            "store_unbounded": None
            if f.tiers.store_blocks is None
            else f.tiers.store_blocks == UNBOUNDED,
            "replica": i,
            "requests": int(requests[i]),
            "input_tokens": int(inp[i]),
            "hit_tokens": int(hit[i]),
            "token_hit_rate": _share(float(hit[i]), float(inp[i])),
            "prefill_tokens": int(o.prefill_tokens[i]),
            "decode_tokens": int(o.decode_tokens[i]),
            "steps": int(o.steps[i]),
            "busy_s": float(o.busy[i]),
            "utilisation": _share(float(o.busy[i]), span),
            "drained_s": float(o.drained_at[i] - o.arrival[0]) if len(o.arrival) else 0.0,
            **deployed,
            **engine_columns(o, i),
        }
        for i in range(n)
    ]


def engine_columns(o: FleetOutcome, replica: int | None = None) -> dict:  # type: ignore[type-arg]
    """The engine's columns: one replica's, or the fleet's (preemptions summed, the
    time-weighted blocks averaged over the replicas)."""
    pick = slice(None) if replica is None else slice(replica, replica + 1)
    return {
        "engine": o.fleet.engine,
        "router_delay_ms": o.fleet.router_delay_s * 1e3,
        "preemptions": int(o.preemptions[pick].sum()),
        "running_blocks_mean": float(o.running_blocks_mean[pick].mean()),
        "running_blocks_p95": float(o.running_blocks_p95[pick].mean()),
        "prefix_cache_blocks_mean": float(o.prefix_cache_blocks_mean[pick].mean()),
    }

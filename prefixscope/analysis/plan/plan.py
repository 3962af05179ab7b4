"""The planner's answers, as rows of the ``plan`` table (docs/schema.md), from stored curves,
simulations and fleet runs, and the trace for LRU's exact refinement and the next GiB.

Three kinds of row, each for the fleet (``'*'``) and each tenant:

- ``capacity``: per policy, the smallest cache (one shared cache) whose token hit rate
  reaches ``target`` × the ceiling over the same requests;
- ``configuration``: the cheapest simulated fleet (replicas × HBM × DRAM × store × router)
  that reaches it, priced in GPUs (``fleets.py``);
- every row says where its figures come from (``source_table``, ``source_run_id``), whether
  the target lies beyond what was simulated (``reached`` false, never extrapolated) and whether
  the cache reached a steady state (``steady``), in ``note`` as words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from prefixscope.analysis.plan.capacity import (
    Point,
    exact_lru,
    fills,
    hit_tokens_at,
    marginal_per_gib,
    smallest_stored,
)
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.analysis.trace.windows import WINDOWS

#: Windows the planner measures over: the same requests at every capacity (``steady`` starts
#: where each capacity's own warm-up ends, so its rates do not form one curve).
PLAN_WINDOWS = ("all", "last-half")

PLAN_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("measure_window", pa.string()),
        ("target_share", pa.float64()),
        ("ceiling_token_hit_rate", pa.float64()),
        ("target_token_hit_rate", pa.float64()),
        ("reached", pa.bool_()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_gib", pa.float64()),
        ("token_hit_rate", pa.float64()),
        ("method", pa.string()),
        ("bracket_low_blocks", pa.int64()),
        ("largest_capacity_blocks", pa.int64()),
        ("steady", pa.bool_()),
        ("marginal_gpu_seconds_per_hour_per_gib", pa.float64()),
        ("router", pa.string()),
        ("replicas", pa.int32()),
        ("dram_blocks", pa.int64()),
        ("store_blocks", pa.int64()),
        ("store_unbounded", pa.bool_()),
        ("load_scale", pa.float64()),
        ("cost_per_hour", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("model", pa.string()),
        ("gpu", pa.string()),
        ("cost_model", pa.string()),
        ("source_table", pa.string()),
        ("source_run_id", pa.string()),
        ("note", pa.string()),
        # the configuration's hardware (added after the table first shipped: last)
        ("deployment", pa.string()),
        ("gpus", pa.int32()),
        ("fleet_gpu", pa.string()),
        ("gpu_hour", pa.float64()),
        ("tier_usd_saved_per_hour", pa.float64()),
        ("tier_usd_per_hour", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Sizing:
    """How blocks become GiB and bytes: the model's KV bytes per block, and the blocks in one
    GiB (at least 1); ``seconds(new, cached)``: the GPU-seconds of one prefill (its time × the
    GPUs it runs on)."""

    model: str
    gpu: str
    cost_model: str
    bytes_per_block: float
    seconds: Callable[[np.ndarray, np.ndarray], np.ndarray]
    kv_dtype: str = "bf16"  # the KV's dtype, for a fleet row of another model (``fleets.py``)

    @property
    def gib_blocks(self) -> int:
        return max(1, int(2**30 // self.bytes_per_block))

    def gib(self, blocks: int) -> float:
        return blocks * self.bytes_per_block / 2**30


def capacity_rows(
    trace: Trace,
    window: str,
    target: float,
    ceilings: dict[str, float],
    points: dict[tuple[str, str], list[Point]],
    sizing: Sizing,
    marginal_trace: Trace | None = None,
    hits_at: HitsAt | None = None,
) -> list[dict]:
    """The ``capacity`` rows: per (tenant, policy) with stored points, fleet first. The value
    of the next GiB is measured on ``marginal_trace`` (a recent stretch of the trace,
    ``trace/tail.py``; default: the trace, over the window) with ``hits_at`` (default:
    :func:`hit_tokens_at` on it, here)."""
    mask = WINDOWS[window](trace)
    inp = {FLEET: float(trace.input_tokens[mask].sum())}
    groups = {FLEET: np.ones(trace.n_requests, bool)}
    for code, name in enumerate(trace.tenants):
        groups[name] = trace.tenant_codes == code
        inp[name] = float(trace.input_tokens[mask & groups[name]].sum())
    answers = {}
    for (tenant, policy), pts in points.items():
        if tenant in ceilings and pts:
            answers[(tenant, policy)] = smallest_stored(pts, target * ceilings[tenant])
    # LRU: the exact smallest capacity between the stored points that bracket it
    lru = {
        t: (a.below, a.point.capacity_blocks)
        for (t, p), a in answers.items()
        if p == "lru" and a.point is not None and a.point.capacity_blocks - a.below > 1
    }
    exact = exact_lru(
        trace, mask, lru, {t: target * ceilings[t] * inp[t] for t in lru}
    ) if lru else {}  # fmt: skip
    rows = []
    for (tenant, policy), a in sorted(answers.items(), key=lambda kv: (kv[0][0] != FLEET, kv[0])):
        ceiling = ceilings[tenant]
        found = a.point
        if policy == "lru" and tenant in exact:
            blocks, hits = exact[tenant]
            rate, method = hits / inp[tenant], "exact: LRU stack distances between stored points"
        elif found is not None:
            blocks, rate = found.capacity_blocks, found.token_hit_rate
            method = "stored point" if a.below + 1 >= blocks else "smallest stored point"
        else:
            blocks, rate, method = a.largest.capacity_blocks, a.largest.token_hit_rate, "none"
        source = found or a.largest
        steady = fills(trace, blocks)
        rows.append(
            {
                "kind": "capacity",
                "tenant": tenant,
                "policy": policy,
                "measure_window": window,
                "target_share": target,
                "ceiling_token_hit_rate": ceiling,
                "target_token_hit_rate": target * ceiling,
                "reached": found is not None,
                "capacity_blocks": blocks if found is not None else None,
                "capacity_tokens": blocks * trace.block_size if found is not None else None,
                "capacity_gib": sizing.gib(blocks) if found is not None else None,
                "token_hit_rate": rate,
                "method": method,
                "bracket_low_blocks": a.below if found is not None else None,
                "largest_capacity_blocks": a.largest.capacity_blocks,
                "steady": steady,
                "model": sizing.model,
                "gpu": sizing.gpu,
                "cost_model": sizing.cost_model,
                "source_table": source.source_table,
                "source_run_id": source.source_run_id,
                "note": _capacity_note(found is not None, method, a.below, blocks, rate, steady),
                "_at": blocks,
            }
        )
    if marginal_trace is None or marginal_trace is trace:
        marginal_trace, marginal_mask, marginal_groups = trace, mask, groups
    else:
        marginal_mask = np.ones(marginal_trace.n_requests, bool)
        marginal_groups = {FLEET: marginal_mask}
        for code, name in enumerate(marginal_trace.tenants):
            marginal_groups[name] = marginal_trace.tenant_codes == code
    on = marginal_trace
    _add_marginals(
        on,
        marginal_mask,
        marginal_groups,
        rows,
        sizing,
        hits_at or (lambda pairs: hit_tokens_at(on, pairs)),
    )
    for row in rows:
        del row["_at"]
    return rows


def _capacity_note(
    reached: bool, method: str, below: int, blocks: int, rate: float, steady: bool
) -> str:
    if not reached:
        return (
            f"beyond the largest capacity simulated ({blocks:,} blocks, rate {rate:.4f}): "
            "not extrapolated; simulate larger capacities"
        )
    words = []
    if method == "smallest stored point" and below + 1 < blocks:
        words.append(
            f"the smallest capacity lies between {below:,} and {blocks:,} blocks: "
            "capacities in between were not simulated"
        )
    if not steady:
        words.append(
            "the trace never fills a cache of this size: nothing was evicted, so this is a "
            "cold-start rate, not a steady state"
        )
    return "; ".join(words)


#: Per (policy, capacity), hit tokens per request of the marginal trace (``hit_tokens_at``,
#: or the same fanned out).
HitsAt = Callable[[Sequence[tuple[str, int]]], dict[tuple[str, int], np.ndarray]]


def _add_marginals(
    trace: Trace,
    mask: np.ndarray,
    groups: dict[str, np.ndarray],
    rows: list[dict],
    sizing: Sizing,
    hits_at: HitsAt,
) -> None:
    """Each row's value of the next GiB, at its answer (or the largest simulated capacity):
    every (policy, capacity) it needs simulated once, with and without the GiB, and shared by
    every tenant."""
    keys = sorted({(r["policy"], r["_at"]) for r in rows if r["policy"] != "ceiling"})
    more = sizing.gib_blocks
    hits = hits_at(sorted({*keys, *((p, c + more) for p, c in keys)}))
    done = {
        (p, c): marginal_per_gib(
            trace, hits[(p, c)], hits[(p, c + more)], mask, groups, sizing.seconds
        )
        for p, c in keys
    }
    for row in rows:
        if row["policy"] != "ceiling":
            row["marginal_gpu_seconds_per_hour_per_gib"] = done[(row["policy"], row["_at"])].get(
                row["tenant"]
            )


def plan_table(rows: Sequence[dict]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=PLAN_SCHEMA)

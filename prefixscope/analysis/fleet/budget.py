"""The miss budget of a fleet run: every prompt token of its requests, served or not, in one
part, and what would win the unserved ones back (table ``miss_budget``, docs/fleet.md).

The fleet loop classifies each request's unserved tokens at its lookup, from the fleet's state
then (``_budget.py``: the rules, in order); its hits are split by the tier that served them.
Per request the parts add up to its prompt tokens, so per tenant and per fleet too. Where no
engine serves what no earlier prompt named (``ideal``; the pools with ``--no-cache-answers``),
``never_seen + always_computed`` is the unbounded cache's miss to the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from prefixscope.analysis.fleet import _budget
from prefixscope.analysis.fleet.run import FleetOutcome
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.fleet.tables import FLEET_HIT_RATES_SCHEMA, Pricing
from prefixscope.analysis.trace.csr import Trace

#: Hits by the tier that served them (``FleetOutcome.source_tokens``' columns).
HITS = ("hit_hbm", "hit_dram", "hit_store")
#: The unserved parts, in ``_budget.py``'s column order, each with the lever that wins it
#: back (None: nothing does).
MISSES = (
    ("always_computed", None),  # the last token's block, a token source's unhashed tail
    ("never_seen", "prompt layout"),  # no earlier prompt named it: the workload's floor
    ("slower_tier_recomputed", "faster tier"),  # cheaper to recompute than to copy
    ("behind_a_miss", "eviction policy"),  # cached, after an uncached block (leading run)
    ("other_replica", "router"),  # another replica held it
    ("evicted", "memory"),  # cached once, dropped since (capacity, ttl)
    ("not_yet_cached", "load"),  # named by a request still queued (pools)
    ("stale_router_view", "fresher routing"),  # where a fresh view would have sent it
)
assert len(MISSES) == _budget.STALE + 1
PARTS = HITS + tuple(name for name, _ in MISSES)
LEVERS = dict(MISSES)

#: What keys a configuration in ``miss_budget`` (as in ``fleet_hit_rates``).
KEYS = (
    "router", "replicas", "capacity_blocks", "policy", "load_scale", "dram_blocks", "dram_gbps",
    "store_blocks", "store_unbounded", "store_gbps", "model", "gpu", "deployment", "engine",
    "router_delay_ms",
)  # fmt: skip

MISS_BUDGET_SCHEMA = pa.schema(
    [
        # the configuration and window, typed as fleet_hit_rates types them
        *(
            FLEET_HIT_RATES_SCHEMA.field(k)
            for k in ("tenant", *KEYS, "measure_window")
            if k != "router_delay_ms"  # added later: the table's last column
        ),
        ("part", pa.string()),
        ("lever", pa.string()),
        ("tokens", pa.int64()),
        ("input_tokens", pa.int64()),
        ("share", pa.float64()),
        ("gpu_seconds", pa.float64()),
        FLEET_HIT_RATES_SCHEMA.field("router_delay_ms"),
    ]
)


def per_request(o: FleetOutcome) -> np.ndarray:
    """Per request its tokens in every part (n × ``len(PARTS)``, ``PARTS`` order)."""
    if o.miss is None:
        raise ValueError("this fleet run kept no miss budget (simulate it with budget=True)")
    return np.concatenate([np.asarray(o.source_tokens, np.int64), o.miss], axis=1)


def part_seconds(trace: Trace, o: FleetOutcome, step: StepCost) -> np.ndarray:
    """Per request and part, prefill seconds (one replica's, ``PARTS`` order): what a hit part
    saved, transfers paid (``FleetOutcome.source_saved_s``), and what serving an unserved
    part too would save, each part alone on top of the request's hits: ``T(new, input − new)
    − T(new − part, input − new + part)`` with ``new = max(input − hit, 1)`` (the step cost's
    prefill alone, as the loop prices a request's own prefill), never below 0: below the step
    cost's knee a short prompt computes no faster for reading more cached keys."""
    assert o.miss is not None
    inp = np.asarray(trace.input_tokens, np.float64)
    new = np.maximum(inp - o.hit_tokens, 1.0)
    now = step.prefill_seconds(new, inp - new)
    out = np.empty((len(inp), len(PARTS)), np.float64)
    out[:, : len(HITS)] = o.source_saved_s
    for k in range(o.miss.shape[1]):
        rest = np.maximum(new - o.miss[:, k], 1.0)
        out[:, len(HITS) + k] = np.maximum(now - step.prefill_seconds(rest, inp - rest), 0.0)
    return out


def budget_rows(
    trace: Trace,
    o: FleetOutcome,
    keys: dict,  # type: ignore[type-arg]
    groups: dict[str, list[tuple[str, np.ndarray]]],
    pricing: Pricing | None = None,
) -> list[dict]:  # type: ignore[type-arg]
    """``miss_budget`` rows of one configuration (``keys``: its ``KEYS`` columns): per window
    and group (``tables.window_groups``: the fleet, then each tenant), one row a part; its
    GPU-seconds where ``pricing`` carries the step cost (:func:`part_seconds`, × its GPUs)."""
    parts = per_request(o)
    priced = pricing is not None and pricing.step is not None
    seconds = part_seconds(trace, o, pricing.step) * pricing.gpus if priced else None  # type: ignore[union-attr,arg-type]
    rows = []
    for window, named in groups.items():
        for name, mask in named:
            tokens = parts[mask].sum(axis=0)
            gpu_s = seconds[mask].sum(axis=0).tolist() if seconds is not None else None
            inp = int(trace.input_tokens[mask].sum())
            for i, (part, count) in enumerate(zip(PARTS, tokens.tolist(), strict=True)):
                rows.append(
                    {
                        **keys,
                        "tenant": name,
                        "measure_window": window,
                        "part": part,
                        "lever": LEVERS.get(part),
                        "tokens": int(count),
                        "input_tokens": inp,
                        "share": count / inp if inp else None,
                        "gpu_seconds": None if gpu_s is None else gpu_s[i],
                    }
                )
    return rows


def table(rows: Sequence[dict]) -> pa.Table:  # type: ignore[type-arg]
    return pa.Table.from_pylist(list(rows), schema=MISS_BUDGET_SCHEMA)


def top_lever(rows: pl.DataFrame) -> dict[str, Any] | None:
    """Of ``rows`` (``miss_budget``'s), the unserved part with a lever (never seen aside: only
    another prompt layout lowers it) that holds the most tokens; None when none holds any."""
    levered = rows.filter(
        pl.col("lever").is_not_null() & (pl.col("part") != "never_seen") & (pl.col("share") > 0)
    )
    return None if levered.is_empty() else levered.sort("share", descending=True).row(0, named=True)

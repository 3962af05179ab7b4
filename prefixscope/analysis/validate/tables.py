"""``validation`` (agreement per tenant and the fleet, and the fleet's effective capacity) and
``validation_disagreements`` (the requests that disagree most), from a trace and its reports."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from prefixscope.analysis.curves.depths import hit_capacities
from prefixscope.analysis.policies import POLICIES, row_policies
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import FLEET, groups, hit_tokens
from prefixscope.analysis.validate import compare, fit
from prefixscope.analysis.validate.reported import (
    MISSING,
    Reported,
    comparison_unit,
    engine_block_size,
    floor_to,
)


def fit_policies() -> tuple[str, ...]:
    """The policies an effective capacity can be fitted for, the registry's row policies:
    ``lru`` exactly at every capacity, the others (``fifo``, ``lfu``, ``s3fifo``, one added)
    at a refined grid (``fit.py``). Unbounded or option-bound policies have none."""
    return ("lru", *(name for name in row_policies() if name != "lru"))


#: Fewest usable reports a capacity is fitted on. Fitting a generated log's reports (an LRU
#: engine of 1,234 blocks, 15% of its reports garbled) on 30 random subsets of n requests, the
#: worst capacity found was 32% off at n = 25, 12% at 50 and 2% at 100, and the median 95%
#: range spanned 0.75, 0.36 and 0.09 of the capacity (docs/validate.md): below 100 a capacity
#: named is mostly the range's width.
MIN_FIT_REPORTS = 100

VALIDATION_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("method", pa.string()),
        ("requests", pa.int64()),
        ("compared", pa.int64()),
        ("block_size", pa.int32()),
        ("engine_block_size", pa.int32()),
        ("compare_unit_tokens", pa.int32()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_low_blocks", pa.int64()),
        ("capacity_high_blocks", pa.int64()),
        ("best_low_blocks", pa.int64()),
        ("best_high_blocks", pa.int64()),
        ("curve_capacity_blocks", pa.int64()),
        ("resamples", pa.int32()),
        ("model", pa.string()),
        ("capacity_gib", pa.float64()),
        ("capacity_low_gib", pa.float64()),
        ("capacity_high_gib", pa.float64()),
        ("input_tokens", pa.int64()),
        ("reported_hit_tokens", pa.int64()),
        ("simulated_hit_tokens", pa.int64()),
        ("exact_match_share", pa.float64()),
        ("mean_abs_error_tokens", pa.float64()),
        ("correlation", pa.float64()),
        ("reported_more", pa.int64()),
        ("reported_fewer", pa.int64()),
        ("note", pa.string()),
        ("beyond_prompt", pa.int64()),
        ("ceiling_hit_tokens", pa.int64()),
    ]
)

DISAGREEMENTS_SCHEMA = pa.schema(
    [
        ("policy", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("rank", pa.int32()),
        ("tenant", pa.string()),
        ("request_id", pa.string()),
        ("input_tokens", pa.int64()),
        ("reported_cached_tokens", pa.int64()),
        ("reported_hit_tokens", pa.int64()),
        ("simulated_hit_tokens", pa.int64()),
        ("error_tokens", pa.int64()),
        ("first_disagreeing_block", pa.int32()),
        ("block_hash", pa.uint64()),
        ("hit_capacity_blocks", pa.int64()),
        ("cause", pa.string()),
    ]
)


@dataclass(frozen=True)
class Sizing:
    """GiB of KV cache per block of the trace, for a model (None: capacities in blocks only)."""

    model: str | None = None
    gib_per_block: float | None = None

    def gib(self, blocks: int | None) -> float | None:
        if blocks is None or self.gib_per_block is None:
            return None
        return blocks * self.gib_per_block


@dataclass(frozen=True)
class Validation:
    """The fit (None: too few usable reports to fit one, the capacity unnamed) and the
    comparison at it, the ``validation`` rows and the ``validation_disagreements`` rows."""

    estimate: fit.Estimate | None
    comparison: compare.Comparison | None
    agreement: pa.Table
    disagreements: pa.Table


def validate(
    trace: Trace,
    reported: Reported,
    policy: str = "lru",
    engine_blocks: int | None = None,
    top: int = 20,
    resamples: int = 200,
    seed: int = 0,
    sizing: Sizing | None = None,
    min_reports: int = MIN_FIT_REPORTS,
) -> Validation:
    """Fit the effective capacity of ``policy`` to the reports, then compare request by request
    at it; with fewer than ``min_reports`` usable reports, name none. ``engine_blocks``: the
    engines' block size (None: inferred from the reports)."""
    if policy not in (fits := fit_policies()):
        raise ValueError(f"validate fits one of {', '.join(fits)}, not {policy!r}")
    compared = reported.present
    if not compared.any():
        raise ValueError(
            "no request carries a reported cached-token count "
            "(usage.prompt_tokens_details.cached_tokens) — ingest gateway logs whose responses "
            "carry usage with `prefixscope ingest --format openai`"
        )
    sizing = sizing or Sizing()
    usable = reported.usable(trace.input_tokens)
    beyond = reported.beyond_prompt(trace.input_tokens)
    # Reports beyond their prompt are left out of everything but their count: one of 3x the
    # prompt would otherwise be "reported" hits no cache can give, and pull the fit up.
    kept = Reported(np.where(usable, reported.tokens, MISSING))
    engine = engine_blocks or engine_block_size(kept)
    unit = comparison_unit(trace.block_size, engine)
    rep = floor_to(kept.tokens, unit)
    ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None)) // unit * unit

    def simulated_at(capacity: int) -> np.ndarray:
        if capacity < 1:
            return np.zeros(trace.n_requests, np.int64)
        hits = POLICIES[policy].hit_blocks(trace, capacity)
        return hit_tokens(trace, hits) // unit * unit

    n_usable = int(usable.sum())
    est = comparison = depth = None
    if n_usable >= max(min_reports, 1):
        depth = hit_capacities(trace) if policy == "lru" else None
        if depth is not None:
            profile: fit.Profile = fit.exact_profile(trace, depth, rep, usable, unit)
        else:
            profile = fit.grid_profile(trace, simulated_at, rep, usable)
        est = fit.estimate(profile, resamples, seed)
        comparison = compare.Comparison(est.capacity_blocks, simulated_at(est.capacity_blocks), rep)
    rows = []
    for tenant, mask in groups(trace.tenant_codes, trace.tenants, keep_empty=True):
        fleet = tenant == FLEET
        row = {
            "tenant": tenant,
            "policy": policy,
            "method": est.method if est else ("exact" if policy == "lru" else "grid"),
            "block_size": trace.block_size,
            "engine_block_size": engine or trace.block_size,
            "compare_unit_tokens": unit,
            "resamples": est.resamples if est else 0,
            "model": sizing.model,
            "beyond_prompt": int((mask & beyond).sum()),
            "ceiling_hit_tokens": int(ceiling[mask & usable].sum()),
            "note": _note(est, mask, reported.present, beyond, n_usable, min_reports)
            if fleet
            else None,
        }
        if est is not None and comparison is not None:
            row |= _fitted(est, trace.block_size, sizing, fleet)
            row |= compare.agreement(trace, comparison, mask)
        else:
            row |= compare.reported_only(trace, rep, mask)
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=VALIDATION_SCHEMA)
    if comparison is None:
        return Validation(None, None, table, DISAGREEMENTS_SCHEMA.empty_table())
    return Validation(
        est,
        comparison,
        table,
        _disagreement_table(trace, reported, comparison, policy, top, depth),
    )


def _fitted(est: fit.Estimate, block_size: int, sizing: Sizing, fleet: bool) -> dict[str, object]:
    """The capacity columns of a row: the fleet's range only on the fleet's row."""
    return {
        "capacity_blocks": est.capacity_blocks,
        "capacity_tokens": est.capacity_blocks * block_size,
        "capacity_low_blocks": est.low_blocks if fleet else None,
        "capacity_high_blocks": est.high_blocks if fleet else None,
        "best_low_blocks": est.best_low if fleet else None,
        "best_high_blocks": est.best_high if fleet else None,
        "curve_capacity_blocks": est.curve_capacity_blocks if fleet else None,
        "capacity_gib": sizing.gib(est.capacity_blocks),
        "capacity_low_gib": sizing.gib(est.low_blocks) if fleet else None,
        "capacity_high_gib": sizing.gib(est.high_blocks) if fleet else None,
    }


def _note(
    est: fit.Estimate | None,
    mask: np.ndarray,
    present: np.ndarray,
    beyond: np.ndarray,
    n_usable: int,
    min_reports: int,
) -> str | None:
    """What the fleet's figures cannot say, in words."""
    parts = []
    missing = int((mask & ~present).sum())
    if missing:
        parts.append(f"{missing:,} requests carry no reported count and are not compared")
    over = int((mask & beyond).sum())
    if over:
        parts.append(
            f"{over:,} reports exceed their prompt's tokens (beyond_prompt) and are left out "
            "of the agreement and the fit"
        )
    if est is None:
        parts.append(
            f"too few usable reports ({n_usable:,}; a fit needs {min_reports:,}): "
            "no capacity is fitted"
        )
    elif est.best_high is None:
        parts.append(
            f"no eviction explains the reports as well: the cache held at least "
            f"{est.best_low:,} blocks, and the trace cannot tell how much more"
        )
    elif est.best_low == 0:
        parts.append(
            f"no cache at all explains the reports as well (as does any capacity up to "
            f"{est.best_high:,} blocks)"
        )
    return "; ".join(parts) or None


def _disagreement_table(
    trace: Trace,
    reported: Reported,
    comparison: compare.Comparison,
    policy: str,
    top: int,
    depth: np.ndarray | None,
) -> pa.Table:
    rows = compare.disagreements(trace, comparison, top, depth)
    out = []
    for row in rows:
        r = int(row.pop("request"))  # type: ignore[call-overload]
        out.append(
            {
                "policy": policy,
                "capacity_blocks": comparison.capacity_blocks,
                "tenant": trace.tenants[trace.tenant_codes[r]],
                "request_id": None if trace.request_ids is None else trace.request_ids[r].as_py(),
                "input_tokens": int(trace.input_tokens[r]),
                "reported_cached_tokens": int(reported.tokens[r]),
                **row,
            }
        )
    return pa.Table.from_pylist(out, schema=DISAGREEMENTS_SCHEMA)

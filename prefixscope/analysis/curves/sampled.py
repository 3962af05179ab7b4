"""The LRU curve estimated from a block sample (``block_sampling.py``).

One pass of the exact curve's kernel over the sample gives, per group and sampled capacity
``c``, the tokens of the sampled lookups that hit: a lookup hits at ``c`` iff the largest
depth among the request's sampled blocks up to it is at most ``c``. With chained hashes that
maximum is the lookup's own depth (an ancestor's latest touch is never older than its
descendant's, in the sample as in the full trace), so it is the sampled reading of "block k
hits iff its depth is at most C"; on any other trace it is the sampled leading-run rule. A
never-seen sampled block misses at every capacity, and so does the rest of its request, so the
kernel's early exit holds on a sample too.

The estimate of a group's hit tokens at the full-scale capacity ``c / rate`` is the *ratio
estimator*: the hit share of its sampled tokens times the tokens its blocks hold
(``covered_tokens``, known exactly from the stream). The other reading, the sampled hit tokens
times ``1 / rate`` over the exact input tokens, is off by the sample's share of tokens
(a binomial draw) at every capacity; the ratio cancels that draw, and measured smaller errors
on both benchmark traces (docs/simulation.md). ``estimates`` gives both.

A sample that keeps some blocks whole (``BlockSample.kept_whole``: the hot blocks, or the first
blocks of each request) is read in two parts: those blocks' hit tokens are known exactly (every
reference is in the sample), and only the other blocks' are estimated, by either reading, over
the tokens the other blocks hold (``covered_tokens`` less the whole blocks' tokens). Depths weigh
a block kept whole 1 and another ``1 / rate`` (``stack.weighted_stack_curve``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from prefixscope.analysis.curves import interval, stack
from prefixscope.analysis.curves.block_sampling import BlockSample
from prefixscope.analysis.curves.curve import (
    Curve,
    Measured,
    capacity_points,
    curve_table,
    drawn_blocks,
    sampled_capacities,
)
from prefixscope.analysis.curves.exact import window_groups
from prefixscope.analysis.curves.settings import BLOCK_RULES, CurveSettings
from prefixscope.analysis.trace.isolation import salted
from prefixscope.analysis.trace.measure import FLEET

ESTIMATORS = ("ratio", "scaled")


@dataclass(frozen=True)
class SampledSums:
    """One group (window, tenant): its exact totals, and what its sampled lookups add up to
    (``sampled_hits`` by sampled capacity)."""

    tenant: str
    window: str
    requests: int
    input_tokens: int
    covered_tokens: int
    sampled_tokens: int
    sampled_hits: np.ndarray
    head_tokens: int = 0  # of the sampled ones, what the blocks kept whole hold
    head_hits: np.ndarray | None = None  # their hit tokens by sampled capacity (exact)
    sampled_blocks: int = 0  # distinct blocks sampled at the rate its tenant looks up


def keyed(sample: BlockSample, isolation: str) -> BlockSample:
    """The sample with blocks keyed by (tenant, block) under ``salted``. Blocks were sampled by
    their own hash, so a block is kept or dropped for every tenant alike: each tenant's keys are
    still a hashed sample at the same rate."""
    return replace(sample, trace=salted(sample.trace)) if isolation == "salted" else sample


def sampled_sums(
    sample: BlockSample,
    points: np.ndarray,
    windows: Sequence[str],
    weights: np.ndarray | None = None,
) -> list[SampledSums]:
    """Per group, the sums of one pass over the sample at sampled capacities ``points``;
    with ``weights`` (one per sampled block, ``interval.py``), of one jackknife replicate:
    a block sampled at the rate stands for that many blocks (one kept whole for one)."""

    trace = sample.trace
    points = np.asarray(points, dtype=np.int64)
    n_tenants = len(trace.tenants)
    plain, groups = window_groups(trace, windows)
    whole = sample.kept_whole
    lookup_weight = None
    if weights is not None:
        whole = np.zeros(trace.n_lookups, np.bool_) if whole is None else whole
        is_whole = np.zeros(trace.n_unique, np.bool_)
        is_whole[trace.blocks[whole]] = True
        weight = np.where(is_whole, sample.rate, weights)
        lookup_weight = np.where(whole, 1.0, weight[trace.blocks])
        hist = interval.weighted_depth_curve(
            trace.offsets,
            trace.blocks,
            trace.n_unique,
            points,
            groups,
            n_tenants,
            sample.lookup_tokens,
            whole,
            weight,
        )
    elif whole is None:
        hist, _ = stack.trace_stack_curve(trace, points, groups, False, sample.lookup_tokens)
        whole = np.zeros(trace.n_lookups, np.bool_)
        hist = np.concatenate([hist, np.zeros_like(hist)], axis=1)
    else:
        hist = stack.weighted_stack_curve(
            trace.offsets,
            trace.blocks,
            trace.n_unique,
            points,
            trace.input_tokens,
            groups,
            n_tenants,
            sample.lookup_tokens,
            whole,
            sample.rate,
        )
    # hist[:, :n] by group: the sampled blocks; hist[:, n:]: the blocks kept whole.
    cum = np.cumsum(hist, axis=2)[:, :, : len(points)]
    hits, head_hits = cum[:, :n_tenants], cum[:, n_tenants:]
    head_weights = np.where(whole, sample.lookup_tokens, 0).astype(float)
    sampled_weights = sample.lookup_tokens.astype(float)
    if lookup_weight is not None:
        sampled_weights = sampled_weights * lookup_weight
    drawn = np.zeros(n_tenants + 1, np.int64)
    if weights is None:  # a replicate's counts are the sample's own
        drawn = drawn_blocks(trace, ~whole)
    out = []
    for row, w in enumerate(plain):
        g = groups[row]
        measured = g >= 0
        code = np.where(measured, g, n_tenants)  # the unmeasured go to a spare slot
        lookup_code = code[trace.request_of_lookup]

        def per_tenant(weights: np.ndarray | None, at: np.ndarray = code) -> np.ndarray:
            return np.bincount(at, weights=weights, minlength=n_tenants + 1)[:n_tenants]

        requests = per_tenant(None)
        inp = per_tenant(trace.input_tokens.astype(float))
        covered = per_tenant(sample.covered_tokens.astype(float))
        sampled = per_tenant(sampled_weights, lookup_code)
        heads = per_tenant(head_weights, lookup_code)
        present = np.flatnonzero(requests > 0)
        out.append(
            SampledSums(
                FLEET,
                w,
                int(requests.sum()),
                int(inp.sum()),
                int(covered.sum()),
                int(round(sampled.sum())),
                hits[row].sum(axis=0),
                int(heads.sum()),
                head_hits[row].sum(axis=0),
                drawn[n_tenants],
            )
        )
        out.extend(
            SampledSums(
                trace.tenants[c],
                w,
                int(requests[c]),
                int(inp[c]),
                int(covered[c]),
                int(round(sampled[c])),
                hits[row, c],
                int(heads[c]),
                head_hits[row, c],
                int(drawn[c]),
            )
            for c in present
        )
    return out


def estimates(s: SampledSums, rate: float, estimator: str = "ratio") -> np.ndarray | None:
    """Estimated hit tokens of the group at each capacity (full scale); None where the sample
    holds none of the group's blocks, so there is nothing to estimate from."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; known: {', '.join(ESTIMATORS)}")
    exact = np.zeros(len(s.sampled_hits)) if s.head_hits is None else s.head_hits
    covered = s.covered_tokens - s.head_tokens  # what the blocks not kept whole hold
    sampled = s.sampled_tokens - s.head_tokens
    if covered == 0:  # every block kept whole (or none at all): known exactly
        return np.asarray(exact, np.int64)
    if sampled == 0:
        return None
    if estimator == "ratio":
        return np.rint(exact + s.sampled_hits * (covered / sampled)).astype(np.int64)
    return np.rint(exact + s.sampled_hits / rate).astype(np.int64)


#: The one sampler whose rows carry a 95% interval: its coverage is measured.
INTERVAL_SAMPLER = "block-hot"


def sampled_lru_curve(
    sample: BlockSample,
    points: np.ndarray,
    windows: Sequence[str],
    replicates: int = interval.GROUPS,
) -> Curve:
    """The estimated curve at sampled capacities ``points``, each group with the blocks its
    estimate rests on and its 95% interval, a jackknife of ``replicates`` groups
    (``interval.py``; 0: none); a group with blocks none of which is sampled has no rows."""
    curve = Curve(np.asarray(points, dtype=np.int64))
    k = len(curve.capacity_blocks)
    sums = sampled_sums(sample, points, windows)
    drawn = np.full((replicates, len(sums), k), np.nan)
    for i in range(replicates):
        weights = interval.group_weights(sample.trace.n_unique, i)
        for j, s in enumerate(sampled_sums(sample, points, windows, weights)):
            hits = estimates(s, sample.rate)
            if hits is not None:
                drawn[i, j] = hits
    for j, s in enumerate(sums):
        hits = estimates(s, sample.rate)
        if hits is None:
            continue
        low = high = None
        if replicates:
            low, high = interval.jackknife_band(drawn[:, j], hits)
        curve.groups.append(
            Measured(
                s.tenant,
                s.window,
                np.full(k, s.requests, np.int64),
                np.full(k, s.input_tokens, np.int64),
                hits,
                s.sampled_blocks,
                low,
                high,
            )
        )
    return curve


def compute_sampled_curves(sample: BlockSample, settings: CurveSettings) -> pa.Table:
    """Every row of the ``mrc`` table from a block sample: requests and input tokens are the
    full trace's, hit tokens the estimate, capacities scaled by ``1 / rate``."""
    settings.check()
    asked = (settings.sample_rate, settings.head, settings.hot)
    if settings.sample_by not in BLOCK_RULES or asked != (
        sample.rate,
        sample.head,
        sample.hot_threshold > 0,
    ):
        raise ValueError("the settings do not describe this block sample")
    sample = keyed(sample, settings.isolation)
    points = capacity_points(sample.trace.n_unique, settings.n_points, sampled_capacities(settings))
    # The interval only where it was shown to hold (docs/simulation.md#curves): a plain or
    # head sample's error is a hot block in or out of every replicate alike, which no
    # resampling of the drawn blocks sees, so its rows carry no interval rather than a false one.
    replicates = interval.GROUPS if settings.sample_by == INTERVAL_SAMPLER else 0
    curve = sampled_lru_curve(sample, points, settings.windows, replicates)
    return curve_table(sample.trace.block_size, [curve], settings)

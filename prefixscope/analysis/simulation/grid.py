"""Replay a trace through every scenario and measure it: the rows of ``hit_rates``,
``hit_rate_timeseries`` and ``request_outcomes``. Pure (trace in, tables out), so it runs
wherever a trace can be shipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from prefixscope.analysis.policies import POLICIES, Outcome, PolicyOptions
from prefixscope.analysis.simulation.gaps import GapBuckets
from prefixscope.analysis.simulation.replay import replay
from prefixscope.analysis.simulation.scenarios import Scenario, Settings
from prefixscope.analysis.simulation.sums import Buckets, Groups, buckets_of, groups_of
from prefixscope.analysis.simulation.tables import OUTCOMES_SCHEMA, TIMESERIES_SCHEMA, Tables
from prefixscope.analysis.structure import pins
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.trace.steady import WarmUp, warm_up
from prefixscope.analysis.trace.windows import STEADY, WINDOWS, check_windows


def cross_tokens(trace: Trace, outcome: Outcome) -> np.ndarray:
    """Hit tokens per request served from blocks another tenant inserted (int64)."""
    if len(outcome.cross) == 0:  # one tenant: nobody else to hit
        return np.zeros(trace.n_requests, dtype=np.int64)
    return _cross_sums(trace.offsets, outcome.cross, trace.servable_tokens, trace.block_size)


@numba.njit(cache=True, nogil=True)
def _cross_sums(offsets, cross, servable, block_size):  # type: ignore[no-untyped-def]
    # One sequential pass, no per-lookup temporaries: at 250 M lookups a masked copy of the
    # served sizes and bincount's float weights took 3 GB and most of a replay's time. Each
    # lookup's served tokens are ``Trace.served_sizes``' rule, computed here rather than read:
    # the array is a gigabyte no replay needs otherwise.
    out = np.zeros(offsets.size - 1, np.int64)
    for r in range(offsets.size - 1):
        total = 0
        start = offsets[r]
        for p in range(start, offsets[r + 1]):
            served = min(max(servable[r] - (p - start) * block_size, 0), block_size)
            total += served * cross[p]  # branch-free: crossings are unpredictable
        out[r] = total
    return out


def policy_options(trace: Trace, settings: Settings) -> PolicyOptions:
    """The options the policies read, resolved against this trace."""
    if settings.pin_file and settings.pin_top:
        raise ValueError("give --pin FILE or --pin-top K, not both")
    pinned = None
    if settings.pin_file:
        pinned = pins.from_file(trace, settings.pin_file)
    elif settings.pin_top:
        pinned = pins.top_shared(trace, settings.pin_top)
    return PolicyOptions(ttl_s=settings.ttl_s, pinned=pinned)


def _option_text(policy: str, settings: Settings, options: PolicyOptions) -> str | None:
    if policy == "ttl":
        return f"ttl={settings.ttl_s:g}s"
    if policy == "pinned" and options.pinned is not None:
        source = f"pin-top={settings.pin_top}" if settings.pin_top else f"pin={settings.pin_file}"
        return f"{source} ({int(options.pinned.sum())} blocks)"
    return None


@dataclass(frozen=True)
class Replayed:
    """One scenario replayed (the first pass): per request its hit blocks (uint16 where they
    fit, ``_compact``) and cross-tenant hit tokens, its own warm-up, and its options as the
    table shows them. Small (per request, not per lookup, and int32 at most), so a fan-out's
    task returns it, and a run holds one per scenario until it is measured: its hit tokens
    follow from the hit blocks (``hit_tokens``), so they are derived when measured rather than
    held (a third of a result, 1.4 GB at 250 M lookups and 33 scenarios)."""

    scenario: Scenario
    hit_blocks: np.ndarray
    cross: np.ndarray
    warmup: WarmUp
    option_text: str | None


def replay_scenarios(
    trace: Trace, scenarios_: Sequence[Scenario], settings: Settings, discard: int = 0
) -> list[Replayed]:
    """The first pass: replay ``trace`` once per scenario (options resolved once), its first
    ``discard`` requests a warm-up (``trace/warm.py``): replayed, then left out of the outcome,
    which is of the rest (``tail(trace, discard)``; a request's hit tokens are its own, so they
    are read off ``trace`` and cut)."""
    check_windows(settings.windows)
    options = policy_options(trace, settings)
    inputs = trace.input_tokens[discard:]
    out = []
    for scenario in scenarios_:
        outcome = replay(
            trace,
            scenario.policy,
            scenario.capacity_blocks,
            options,
            scenario.isolation,
            settings.quota_file,
        )
        tokens = hit_tokens(trace, outcome.hit_blocks)[discard:]
        bounded = POLICIES[scenario.policy].bounded
        warmup = warm_up(tokens, inputs, outcome.filled_at - discard, bounded)
        if bounded and 0 <= outcome.filled_at < discard:  # full before the first measured
            warmup = WarmUp(warmup.mser_end, True, warmup.mser_end)
        out.append(
            Replayed(
                scenario,
                _compact(trace, outcome.hit_blocks[discard:]),
                _narrow(cross_tokens(trace, outcome)[discard:]),
                warmup,
                _option_text(scenario.policy, settings, options),
            )
        )
    return out


def _compact(trace: Trace, hit_blocks: np.ndarray) -> np.ndarray:
    """Hit blocks as uint16 where no request holds 65,536 blocks (every log seen: 32 M tokens at
    512): a run holds one per request and scenario until it is measured (0.8 GB of 3.1 at 250 M
    lookups and 37 scenarios saved)."""
    n = trace.blocks_per_request
    if len(n) and int(n.max()) < 2**16:
        return hit_blocks.astype(np.uint16)
    return hit_blocks


def _narrow(values: np.ndarray) -> np.ndarray:
    """Non-negative counts in the narrowest of uint16 and int32 that holds them: a request's
    cross-tenant tokens rarely pass 65,535 (a shared system prompt), and a run holds them per
    request and scenario until measured (0.8 GB at 250 M lookups and 37 scenarios saved)."""
    if len(values) == 0 or int(values.max()) < 2**16:
        return values.astype(np.uint16)
    return values.astype(np.int32)


def shared_start(trace: Trace, replayed: Sequence[Replayed]) -> int:
    """The one steady window of a run starts at the latest warm-up end among its
    configurations. A configuration whose cache never filled has no warm-up end and does not
    push it; when none has one, nothing is measured (the start is ``n_requests``)."""
    ends = [r.warmup.end for r in replayed if r.warmup.filled]
    return max(ends) if ends else trace.n_requests


def measure_replayed(
    trace: Trace,
    replayed: Sequence[Replayed],
    settings: Settings,
    outcomes_for: Scenario | None = None,
    gaps: GapBuckets | None = None,
    ceilings: dict[str, np.ndarray] | None = None,
) -> Tables:
    """The second pass: the rows, every steady row from the run's shared start, every row with
    the ceiling's rate over its own measured requests (one ``ceiling`` replay per isolation
    mode, reused when the run has it). ``request_outcomes`` rows: of ``outcomes_for`` alone
    when given, else of every scenario when ``settings.outcomes``; ``misses_by_gap`` rows of
    every scenario, over the whole trace, when ``gaps`` (the requests' buckets) is given.
    ``ceilings``: per isolation mode the unbounded cache's hit tokens where the run has them
    already (a warm start's, ``simulate_scenarios``)."""
    start = shared_start(trace, replayed)
    ceilings = dict(ceilings or {})
    for r in replayed:
        if r.scenario.policy == "ceiling":
            ceilings.setdefault(r.scenario.isolation, hit_tokens(trace, r.hit_blocks))
    tables = Tables()
    # every scenario measures the same requests per window (the steady one from the shared
    # start): their groups, counts and batches are found once (``sums.py``)
    groups = {w: groups_of(trace, _measured(trace, w, start), intervals=w == STEADY)
              for w in settings.windows}  # fmt: skip
    if settings.bucket_s <= 0:
        raise ValueError(f"bucket must be positive, got {settings.bucket_s} s")
    buckets = buckets_of(trace, np.floor(trace.times / settings.bucket_s).astype(np.int64))
    ceiling_sums: dict[tuple[str, str], np.ndarray] = {}
    for r in replayed:
        mode = r.scenario.isolation
        if mode not in ceilings:
            ceiling = replay(trace, "ceiling", None, PolicyOptions(), mode, settings.quota_file)
            ceilings[mode] = hit_tokens(trace, ceiling.hit_blocks)
        base = _base_row(trace, r.scenario, settings, r.option_text)
        tokens = hit_tokens(trace, r.hit_blocks)
        for window in settings.windows:
            if (mode, window) not in ceiling_sums:  # the same for every scenario of the mode
                ceiling_sums[mode, window] = groups[window].sums(ceilings[mode]).astype(np.int64)
            tables.hit_rates += _window_rows(
                r, tokens, ceiling_sums[mode, window], window, start, base, groups[window]
            )
        tables.timeseries.append(_timeseries(trace, r.scenario, tokens, settings.bucket_s, buckets))
        if r.scenario == outcomes_for or (outcomes_for is None and settings.outcomes):
            tables.outcomes.append(_outcomes(trace, r, tokens))
        if gaps is not None:
            tables.misses_by_gap.append(gaps.rows(trace, r.scenario, tokens))
    return tables


def simulate_grid(trace: Trace, scenarios_: Sequence[Scenario], settings: Settings) -> Tables:
    """Replay ``trace`` once per scenario and measure it over every window; all scenarios
    share one steady window (:func:`shared_start`)."""
    return measure_replayed(trace, replay_scenarios(trace, scenarios_, settings), settings)


def _base_row(trace: Trace, s: Scenario, settings: Settings, option_text: str | None) -> dict:
    cap = s.capacity_blocks
    return {
        "policy": s.policy,
        "policy_options": option_text,
        "isolation": s.isolation,
        "capacity_blocks": cap,
        "capacity_tokens": None if cap is None else cap * trace.block_size,
        "capacity_gib": s.capacity_gib,
        "model": settings.model if s.capacity_gib is not None else None,
        "kv_dtype": settings.kv_dtype if s.capacity_gib is not None else None,
        "block_size": trace.block_size,
        "warm_start": settings.warm_start,
        "warm_requests": settings.warm_requests,
    }


def _measured(trace: Trace, window: str, start: int) -> np.ndarray:
    """The requests a window measures: the steady one from the run's shared ``start``."""
    return np.arange(trace.n_requests) >= start if window == STEADY else WINDOWS[window](trace)


def _window_rows(  # type: ignore[no-untyped-def]
    r: Replayed,
    tokens: np.ndarray,
    ceilings: np.ndarray,
    window: str,
    start: int,
    base: dict,
    groups: Groups,
) -> list[dict]:
    """``tokens``: ``r``'s hit tokens per request; ``ceilings``: the ceiling's hit tokens per
    group; ``groups``: the window's measured requests, the fleet then each tenant
    (``sums.py``)."""
    ci_wanted = window == STEADY
    steady_flag = r.warmup.filled if ci_wanted else None
    own = r.warmup.end if ci_wanted and r.warmup.filled else None
    reported = not ci_wanted or bool(steady_flag)
    hits = groups.sums(tokens).astype(np.int64)
    hit_requests = groups.sums((r.hit_blocks > 0).astype(np.int64)).astype(np.int64)
    cross = groups.sums(r.cross.astype(np.int64)).astype(np.int64)
    cis = groups.intervals(tokens) if ci_wanted else [None] * len(groups.names)
    rows = []
    for g, name in enumerate(groups.names):
        n, inp = int(groups.requests[g]), int(groups.inputs[g])
        hit, hit_req, ci = int(hits[g]), int(hit_requests[g]), cis[g]
        rows.append(
            {
                **base,
                "tenant": name,
                "measure_window": window,
                "requests": n,
                "input_tokens": inp,
                "hit_tokens": hit,
                "cross_tenant_hit_tokens": int(cross[g]),
                "hit_requests": hit_req,
                "token_hit_rate": hit / inp if inp and reported else None,
                "request_hit_rate": hit_req / n if n and reported else None,
                "warmup_requests": start if ci_wanted else None,
                "own_warmup_requests": own,
                "steady": steady_flag,
                "ci_low": ci[0] if ci and reported else None,
                "ci_high": ci[1] if ci and reported else None,
                "ceiling_token_hit_rate": int(ceilings[g]) / inp if inp else None,
            }
        )
    return rows


def _timeseries(
    trace: Trace, s: Scenario, tokens: np.ndarray, bucket_s: float, buckets: Buckets
) -> pa.Table:
    """``hit_rate_timeseries`` rows of one scenario, as columns: per group (the fleet then each
    tenant) every bucket with requests (``sums.Buckets``). A week at 5-minute buckets is about
    2,000 rows a group and scenario, so never one dict a row."""
    k = len(buckets.requests)
    if k == 0:
        return TIMESERIES_SCHEMA.empty_table()
    inp, hit = buckets.inputs, buckets.hits(tokens)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = hit / inp
    at = ((trace.start_s + buckets.starts * bucket_s) * 1e6).astype(np.int64)
    return pa.table(
        {
            "tenant": pa.DictionaryArray.from_arrays(
                pa.array(buckets.group), pa.array(list(buckets.names), pa.string())
            ).cast(pa.string()),
            "policy": pa.repeat(pa.scalar(s.policy, pa.string()), k),
            "isolation": pa.repeat(pa.scalar(s.isolation, pa.string()), k),
            "capacity_blocks": pa.repeat(pa.scalar(s.capacity_blocks, pa.int64()), k),
            "bucket_start": pa.array(at, pa.timestamp("us", tz="UTC")),
            "bucket_seconds": pa.repeat(pa.scalar(float(bucket_s), pa.float64()), k),
            "requests": pa.array(buckets.requests, pa.int64()),
            "input_tokens": pa.array(inp, pa.int64()),
            "hit_tokens": pa.array(hit, pa.int64()),
            "token_hit_rate": pa.array(rate, pa.float64(), mask=inp == 0),
        },
        schema=TIMESERIES_SCHEMA,
    )


def _outcomes(trace: Trace, r: Replayed, tokens: np.ndarray) -> pa.Table:
    s, hit_blocks, cross = r.scenario, r.hit_blocks.astype(np.int32), r.cross
    n_blocks = trace.blocks_per_request
    first_miss = np.where(hit_blocks < n_blocks, hit_blocks, -1)
    return pa.table(
        {
            "request_id": trace.request_ids
            if trace.request_ids is not None
            else pa.array([str(i) for i in range(trace.n_requests)]),
            "tenant": pa.DictionaryArray.from_arrays(
                pa.array(trace.tenant_codes, pa.int32()), pa.array(trace.tenants, pa.string())
            ).cast(pa.string()),
            "policy": pa.repeat(pa.scalar(s.policy, pa.string()), trace.n_requests),
            "isolation": pa.repeat(pa.scalar(s.isolation, pa.string()), trace.n_requests),
            "capacity_blocks": pa.repeat(
                pa.scalar(s.capacity_blocks, pa.int64()), trace.n_requests
            ),
            "input_tokens": pa.array(trace.input_tokens),
            "hit_blocks": pa.array(hit_blocks, pa.int32()),
            "hit_tokens": pa.array(tokens, pa.int64()),
            "first_miss_block": pa.array(first_miss.astype(np.int32), mask=first_miss < 0),
            "cross_tenant_hit_tokens": pa.array(cross, pa.int64()),
        },
        schema=OUTCOMES_SCHEMA,
    )

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
from prefixscope.analysis.simulation.replay import replay
from prefixscope.analysis.simulation.scenarios import Scenario, Settings
from prefixscope.analysis.simulation.tables import OUTCOMES_SCHEMA, TIMESERIES_SCHEMA, Tables
from prefixscope.analysis.structure import pins
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import hit_tokens, trace_index_groups
from prefixscope.analysis.trace.steady import WarmUp, batch_means_ci, warm_up
from prefixscope.analysis.trace.windows import STEADY, WINDOWS, check_windows


def cross_tokens(trace: Trace, outcome: Outcome) -> np.ndarray:
    """Hit tokens per request served from blocks another tenant inserted (int64)."""
    if len(outcome.cross) == 0:  # one tenant: nobody else to hit
        return np.zeros(trace.n_requests, dtype=np.int64)
    return _cross_sums(trace.offsets, outcome.cross, trace.served_sizes)


@numba.njit(cache=True, nogil=True)
def _cross_sums(offsets, cross, served):  # type: ignore[no-untyped-def]
    # One sequential pass, no per-lookup temporaries: at 250 M lookups a masked copy of the
    # served sizes and bincount's float weights took 3 GB and most of a replay's time.
    out = np.zeros(offsets.size - 1, np.int64)
    for r in range(offsets.size - 1):
        total = 0
        for p in range(offsets[r], offsets[r + 1]):
            total += served[p] * cross[p]  # branch-free: crossings are unpredictable
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
    """One scenario replayed (the first pass): per request its hit blocks and cross-tenant hit
    tokens, its own warm-up, and its options as the table shows them. Small (per request, not
    per lookup, and int32), so a fan-out's task returns it, and a run holds one per scenario
    until it is measured: its hit tokens follow from the hit blocks (``hit_tokens``), so they
    are derived when measured rather than held (a third of a result, 1.4 GB at 250 M
    lookups and 33 scenarios)."""

    scenario: Scenario
    hit_blocks: np.ndarray
    cross: np.ndarray
    warmup: WarmUp
    option_text: str | None


def replay_scenarios(
    trace: Trace, scenarios_: Sequence[Scenario], settings: Settings
) -> list[Replayed]:
    """The first pass: replay ``trace`` once per scenario (options resolved once)."""
    check_windows(settings.windows)
    options = policy_options(trace, settings)
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
        tokens = hit_tokens(trace, outcome.hit_blocks)
        bounded = POLICIES[scenario.policy].bounded
        out.append(
            Replayed(
                scenario,
                outcome.hit_blocks,
                cross_tokens(trace, outcome).astype(np.int32),  # int32 halves a result's size
                warm_up(tokens, trace.input_tokens, outcome.filled_at, bounded),
                _option_text(scenario.policy, settings, options),
            )
        )
    return out


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
) -> Tables:
    """The second pass: the rows, every steady row from the run's shared start, every row with
    the ceiling's rate over its own measured requests (one ``ceiling`` replay per isolation
    mode, reused when the run has it). ``request_outcomes`` rows: of ``outcomes_for`` alone
    when given, else of every scenario when ``settings.outcomes``."""
    start = shared_start(trace, replayed)
    ceilings: dict[str, np.ndarray] = {
        r.scenario.isolation: hit_tokens(trace, r.hit_blocks)
        for r in replayed
        if r.scenario.policy == "ceiling"
    }
    tables = Tables()
    # every scenario measures the same requests per window (the steady one from the shared
    # start): their groups are found once
    groups = {w: trace_index_groups(trace, _measured(trace, w, start)) for w in settings.windows}
    every = trace_index_groups(trace, np.ones(trace.n_requests, bool))
    if settings.bucket_s <= 0:
        raise ValueError(f"bucket must be positive, got {settings.bucket_s} s")
    bucket = np.floor(trace.times / settings.bucket_s).astype(np.int64)
    for r in replayed:
        mode = r.scenario.isolation
        if mode not in ceilings:
            ceiling = replay(trace, "ceiling", None, PolicyOptions(), mode, settings.quota_file)
            ceilings[mode] = hit_tokens(trace, ceiling.hit_blocks)
        base = _base_row(trace, r.scenario, settings, r.option_text)
        tokens = hit_tokens(trace, r.hit_blocks)
        for window in settings.windows:
            tables.hit_rates += _window_rows(
                trace, r, tokens, ceilings[mode], window, start, base, groups[window]
            )
        tables.timeseries.append(
            _timeseries(trace, r.scenario, tokens, settings.bucket_s, every, bucket)
        )
        if r.scenario == outcomes_for or (outcomes_for is None and settings.outcomes):
            tables.outcomes.append(_outcomes(trace, r, tokens))
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
    }


def _measured(trace: Trace, window: str, start: int) -> np.ndarray:
    """The requests a window measures: the steady one from the run's shared ``start``."""
    return np.arange(trace.n_requests) >= start if window == STEADY else WINDOWS[window](trace)


def _window_rows(  # type: ignore[no-untyped-def]
    trace: Trace,
    r: Replayed,
    tokens: np.ndarray,
    ceiling: np.ndarray,
    window: str,
    start: int,
    base: dict,
    groups: list[tuple[str, np.ndarray]],
) -> list[dict]:
    """``tokens``: ``r``'s hit tokens per request; ``groups``: the window's measured requests,
    the fleet then each tenant (positions)."""
    ci_wanted = window == STEADY
    steady_flag = r.warmup.filled if ci_wanted else None
    own = r.warmup.end if ci_wanted and r.warmup.filled else None
    rows = []
    for name, mask in groups:
        n = len(mask)
        inp, hit = int(trace.input_tokens[mask].sum()), int(tokens[mask].sum())
        hit_requests = int((r.hit_blocks[mask] > 0).sum())
        ci = batch_means_ci(tokens[mask], trace.input_tokens[mask]) if ci_wanted else None
        reported = not ci_wanted or bool(steady_flag)
        rows.append(
            {
                **base,
                "tenant": name,
                "measure_window": window,
                "requests": n,
                "input_tokens": inp,
                "hit_tokens": hit,
                "cross_tenant_hit_tokens": int(r.cross[mask].sum()),
                "hit_requests": hit_requests,
                "token_hit_rate": hit / inp if inp and reported else None,
                "request_hit_rate": hit_requests / n if n and reported else None,
                "warmup_requests": start if ci_wanted else None,
                "own_warmup_requests": own,
                "steady": steady_flag,
                "ci_low": ci[0] if ci and reported else None,
                "ci_high": ci[1] if ci and reported else None,
                "ceiling_token_hit_rate": int(ceiling[mask].sum()) / inp if inp else None,
            }
        )
    return rows


def _timeseries(
    trace: Trace,
    s: Scenario,
    tokens: np.ndarray,
    bucket_s: float,
    groups: list[tuple[str, np.ndarray]],
    bucket: np.ndarray,
) -> pa.Table:
    """``hit_rate_timeseries`` rows of one scenario, as columns: per group (the fleet then each
    tenant, ``groups``) every bucket (``bucket``: each request's) with requests. A week at
    5-minute buckets is about 2,000 rows a group and scenario, so never one dict a row."""
    names, starts, requests, inputs, hits = [], [], [], [], []
    for _, rows in groups:
        b = bucket[rows]
        n = np.bincount(b)
        present = np.flatnonzero(n)
        names.append(np.full(len(present), len(names), np.int32))
        starts.append(present)
        requests.append(n[present])
        inputs.append(np.bincount(b, weights=trace.input_tokens[rows]).astype(np.int64)[present])
        hits.append(np.bincount(b, weights=tokens[rows]).astype(np.int64)[present])
    k = sum(len(x) for x in starts)
    if k == 0:
        return TIMESERIES_SCHEMA.empty_table()
    inp, hit = np.concatenate(inputs), np.concatenate(hits)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = hit / inp
    at = ((trace.start_s + np.concatenate(starts) * bucket_s) * 1e6).astype(np.int64)
    return pa.table(
        {
            "tenant": pa.DictionaryArray.from_arrays(
                pa.array(np.concatenate(names)), pa.array([g for g, _ in groups], pa.string())
            ).cast(pa.string()),
            "policy": pa.repeat(pa.scalar(s.policy, pa.string()), k),
            "isolation": pa.repeat(pa.scalar(s.isolation, pa.string()), k),
            "capacity_blocks": pa.repeat(pa.scalar(s.capacity_blocks, pa.int64()), k),
            "bucket_start": pa.array(at, pa.timestamp("us", tz="UTC")),
            "bucket_seconds": pa.repeat(pa.scalar(float(bucket_s), pa.float64()), k),
            "requests": pa.array(np.concatenate(requests), pa.int64()),
            "input_tokens": pa.array(inp, pa.int64()),
            "hit_tokens": pa.array(hit, pa.int64()),
            "token_hit_rate": pa.array(rate, pa.float64(), mask=inp == 0),
        },
        schema=TIMESERIES_SCHEMA,
    )


def _outcomes(trace: Trace, r: Replayed, tokens: np.ndarray) -> pa.Table:
    s, hit_blocks, cross = r.scenario, r.hit_blocks, r.cross
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

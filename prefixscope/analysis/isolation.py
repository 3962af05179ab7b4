"""Tenant isolation: how tenants share one cache.

- ``shared``: one cache; a tenant can hit blocks another tenant inserted.
- ``salted``: one cache, but every tenant's blocks are its own (vLLM's ``cache_salt``): the
  trace is re-keyed by (tenant, block), so tenants never share a block.
- ``partitioned``: each tenant its own cache of ``quota × capacity`` blocks (at least one):
  quotas proportional to each tenant's block lookups, or given in a file (``tenant,share``).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np

from prefixscope.analysis.policies import POLICIES, Outcome, PolicyOptions
from prefixscope.analysis.trace import Trace

ISOLATIONS = ("shared", "salted", "partitioned")


def salted(trace: Trace) -> Trace:
    """``trace`` with block ids keyed by (tenant, block)."""
    pairs = trace.tenant_codes[trace.request_of_lookup].astype(np.int64) * trace.n_unique
    unique, dense = np.unique(pairs + trace.blocks, return_inverse=True)
    return replace(
        trace,
        blocks=dense.astype(np.int32).ravel(),
        n_unique=len(unique),
        hashes=trace.hashes[unique % trace.n_unique],
    )


def subset(trace: Trace, requests: np.ndarray) -> Trace:
    """The requests at positions ``requests`` (sorted), with their own dense ids."""
    sizes = trace.blocks_per_request[requests]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    lookups = (
        np.concatenate([np.arange(trace.offsets[r], trace.offsets[r + 1]) for r in requests])
        if len(requests)
        else np.zeros(0, np.int64)
    )
    unique, dense = np.unique(trace.blocks[lookups], return_inverse=True)
    return replace(
        trace,
        offsets=offsets,
        blocks=dense.astype(np.int32).ravel(),
        input_tokens=trace.input_tokens[requests],
        tenant_codes=trace.tenant_codes[requests],
        n_unique=len(unique),
        times=trace.times[requests],
        hashes=trace.hashes[unique],
        request_ids=None,
    )


def quotas(trace: Trace, quota_file: str | Path | None = None) -> np.ndarray:
    """Each tenant's share of the capacity (sums to 1)."""
    if quota_file is None:
        lookups = np.bincount(
            trace.tenant_codes, weights=trace.blocks_per_request, minlength=len(trace.tenants)
        )
        return lookups / lookups.sum()
    given: dict[str, float] = {}
    with open(quota_file, newline="") as f:
        for row in csv.reader(f):
            if row and not row[0].startswith("#") and row[0] != "tenant":
                given[row[0]] = float(row[1])
    missing = [t for t in trace.tenants if t not in given]
    if missing:
        raise ValueError(f"the quota file has no share for tenant(s) {', '.join(missing[:5])}")
    shares = np.array([given[t] for t in trace.tenants], dtype=float)
    if np.any(shares < 0) or shares.sum() <= 0:
        raise ValueError("quota shares must be non-negative and not all zero")
    return shares / shares.sum()


def replay(
    trace: Trace,
    policy: str,
    capacity: int | None,
    options: PolicyOptions,
    isolation: str = "shared",
    quota_file: str | Path | None = None,
) -> Outcome:
    """Replay under an isolation mode; the outcome is in ``trace``'s own request order."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"unknown isolation {isolation!r}; known: {', '.join(ISOLATIONS)}")
    impl = POLICIES[policy]
    if isolation == "shared" or capacity is None and isolation == "partitioned":
        return impl.replay(trace, capacity, options)
    if isolation == "salted":
        keyed = salted(trace)
        return impl.replay(keyed, capacity, _remap_pins(options, trace, keyed))
    hits = np.zeros(trace.n_requests, np.int32)
    cross = np.zeros(0, np.bool_)  # a partition holds one tenant: no cross-tenant hits
    filled = []
    for code, share in enumerate(quotas(trace, quota_file)):
        rows = np.flatnonzero(trace.tenant_codes == code)
        if len(rows) == 0:
            continue
        part = subset(trace, rows)
        quota = max(1, int(share * capacity))  # type: ignore[operator]
        out = impl.replay(part, quota, _remap_pins(options, trace, part))
        hits[rows] = out.hit_blocks
        filled.append(rows[out.filled_at] if out.filled_at >= 0 else -1)
    # The fleet's cache is full once every partition is.
    filled_at = -1 if not filled or min(filled) < 0 else int(max(filled))
    return Outcome(hits, cross, filled_at)


def _remap_pins(options: PolicyOptions, whole: Trace, part: Trace) -> PolicyOptions:
    if options.pinned is None:
        return options
    pinned_hashes = whole.hashes[np.asarray(options.pinned, dtype=bool)]
    return replace(options, pinned=np.isin(part.hashes, pinned_hashes))

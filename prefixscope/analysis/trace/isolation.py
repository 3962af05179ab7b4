"""Tenant isolation: how tenants share one cache.

- ``shared``: one cache; a tenant can hit blocks another tenant inserted.
- ``salted``: one cache, but every tenant's blocks are its own (vLLM's ``cache_salt``): the
  trace is re-keyed by (tenant, block), so tenants never share a block.
- ``partitioned``: each tenant its own cache of ``quota × capacity`` blocks (at least one):
  quotas proportional to each tenant's block lookups, or given in a file (``tenant,share``).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.tail import _first_seen
from prefixscope.textfile import read_text

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


def subset(trace: Trace, requests: np.ndarray, slot: np.ndarray | None = None) -> Trace:
    """The requests at positions ``requests`` (sorted), with their own dense ids: in the
    order of the trace's ids, or, given ``slot`` (an int32 per id of ``trace``, all 0, left
    so on return), in the order they are first looked up, one pass with no sort, so that one
    table serves many subsets of a trace (``structure/answers.py``, a subset per replica)."""
    sizes = trace.blocks_per_request[requests]
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    # each kept request's lookups in order: its first lookup, stepped by the position within
    lookups = np.repeat(trace.offsets[:-1][requests] - offsets[:-1], sizes) + np.arange(
        offsets[-1], dtype=np.int64
    )
    if slot is None:
        unique, dense = np.unique(trace.blocks[lookups], return_inverse=True)
    else:
        dense, unique = _first_seen(trace.blocks[lookups], slot)
        slot[unique] = 0
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
        last_token_rule=None if trace.last_token_rule is None else trace.last_token_rule[requests],
        sessions=None if trace.sessions is None else trace.sessions[requests],
    )


def quotas(trace: Trace, quota_file: str | Path | None = None) -> np.ndarray:
    """Each tenant's share of the capacity (sums to 1)."""
    if quota_file is None:
        lookups = np.bincount(
            trace.tenant_codes, weights=trace.blocks_per_request, minlength=len(trace.tenants)
        )
        return lookups / lookups.sum()
    given: dict[str, float] = {}
    text = read_text(quota_file, 2**20, "a quota file", "give tenant,share lines")
    for number, row in enumerate(csv.reader(io.StringIO(text, newline="")), 1):
        if row and not row[0].startswith("#") and row[0] != "tenant":
            try:
                share = float(row[1])
            except (IndexError, ValueError):
                share = math.nan
            if not math.isfinite(share):
                raise ValueError(
                    f"{quota_file}, line {number}: not tenant,share with a finite share — "
                    "give tenant,share lines"
                )
            given[row[0]] = share
    missing = [t for t in trace.tenants if t not in given]
    if missing:
        raise ValueError(f"the quota file has no share for tenant(s) {', '.join(missing[:5])}")
    shares = np.array([given[t] for t in trace.tenants], dtype=float)
    if np.any(shares < 0) or shares.sum() <= 0:
        raise ValueError("quota shares must be non-negative and not all zero")
    return shares / shares.sum()

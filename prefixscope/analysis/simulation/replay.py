"""One replay of a trace through a policy under an isolation mode (``trace/isolation.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from prefixscope.analysis.policies import POLICIES, Outcome, PolicyOptions
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import ISOLATIONS, quotas, salted, subset
from prefixscope.analysis.trace.measure import served_blocks


def replay(
    trace: Trace,
    policy: str,
    capacity: int | None,
    options: PolicyOptions,
    isolation: str = "shared",
    quota_file: str | Path | None = None,
) -> Outcome:
    """Replay under an isolation mode; the outcome is in ``trace``'s own request order, its hit
    blocks those the request is served from (``measure.served_blocks``: the last-token rule)."""
    out = _replay(trace, policy, capacity, options, isolation, quota_file)
    return replace(out, hit_blocks=served_blocks(trace, out.hit_blocks))


def _replay(
    trace: Trace,
    policy: str,
    capacity: int | None,
    options: PolicyOptions,
    isolation: str,
    quota_file: str | Path | None,
) -> Outcome:
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

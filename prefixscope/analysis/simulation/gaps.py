"""Missed tokens by the gap before a request within its session (table ``misses_by_gap``).

An agent's cache misses are told apart by how long its session had been quiet: a request
seconds after the previous one inside a tool-call loop should hit, one after minutes of
thinking may have lost its blocks to eviction. Per configuration, tenant (``*``: the fleet),
gap bucket and whether the request is a sub-agent's: requests, input tokens, missed tokens
(input minus hit: a partial tail and a recomputed last token count as missed) and the bucket's
share of the tenant's missed tokens in that configuration. Buckets: ``first`` (a session's
first request), then gaps (arrival to arrival) cut at ``bounds`` seconds, ``<10s``,
``10s-1m``, ``1m-5m``, ``>=5m`` by default; ``no session`` for requests of a log that names
none. Every request is in exactly one bucket, so each tenant's shares add up to 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope import sql
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import REPLAY_ORDER, has_column

#: The default cuts (s): under 10 s, 10 s to 1 min, 1 to 5 min, 5 min and more.
DEFAULT_BOUNDS = (10.0, 60.0, 300.0)
NO_SESSION = "no session"
FIRST = "first"
FLEET = "*"

MISSES_BY_GAP_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("gap_bucket", pa.string()),
        ("gap_low_s", pa.float64()),
        ("gap_high_s", pa.float64()),
        ("subagent", pa.bool_()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("missed_tokens", pa.int64()),
        ("share", pa.float64()),
    ]
)


@dataclass(frozen=True)
class GapBuckets:
    """Each request's bucket (replay order; ``labels[bucket]``) and whether it is a sub-agent's."""

    bounds: tuple[float, ...]
    bucket: np.ndarray  # int64 index into labels()
    subagent: np.ndarray  # bool

    def tail(self, first: int) -> GapBuckets:
        """Those of requests ``first ..`` (a warm start's measured ones)."""
        return replace(self, bucket=self.bucket[first:], subagent=self.subagent[first:])

    def labels(self) -> list[tuple[str, float | None, float | None]]:
        """(label, low s, high s) of every bucket: no session, first, then the gap ranges."""
        edges = (0.0, *self.bounds)
        out: list[tuple[str, float | None, float | None]] = [
            (NO_SESSION, None, None),
            (FIRST, None, None),
        ]
        for i, low in enumerate(edges):
            high = edges[i + 1] if i + 1 < len(edges) else None
            name = f">={_short(low)}" if high is None else f"{_short(low)}-{_short(high)}"
            out.append((f"<{_short(high)}" if low == 0 and high is not None else name, low, high))
        return out

    def rows(self, trace: Trace, scenario: object, hit_tokens: np.ndarray) -> pa.Table:
        """The rows of one configuration (``scenario``: policy, isolation, capacity_blocks)."""
        tokens = trace.input_tokens.astype(np.int64)
        missed = tokens - hit_tokens.astype(np.int64)
        labels = self.labels()
        names = trace.tenants
        out: list[dict[str, object]] = []
        for tenant_code in [None, *range(len(names))]:
            mine = (
                np.ones(len(tokens), bool)
                if tenant_code is None
                else trace.tenant_codes == tenant_code
            )
            if not mine.any():
                continue
            total = int(missed[mine].sum())
            key = self.bucket[mine] * 2 + self.subagent[mine]
            count = np.bincount(key, minlength=2 * len(labels))
            inp = np.bincount(key, weights=tokens[mine], minlength=2 * len(labels))
            miss = np.bincount(key, weights=missed[mine], minlength=2 * len(labels))
            for k in np.flatnonzero(count):
                label, low, high = labels[k // 2]
                out.append({
                    "tenant": FLEET if tenant_code is None else str(names[tenant_code]),
                    "policy": scenario.policy,  # type: ignore[attr-defined]
                    "isolation": scenario.isolation,  # type: ignore[attr-defined]
                    "capacity_blocks": scenario.capacity_blocks,  # type: ignore[attr-defined]
                    "gap_bucket": label, "gap_low_s": low, "gap_high_s": high,
                    "subagent": bool(k % 2), "requests": int(count[k]),
                    "input_tokens": int(round(inp[k])), "missed_tokens": int(round(miss[k])),
                    "share": float(miss[k]) / total if total else None,
                })  # fmt: skip
        return pa.Table.from_pylist(out, schema=MISSES_BY_GAP_SCHEMA)


def check_bounds(bounds: tuple[float, ...]) -> tuple[float, ...]:
    """Strictly increasing, finite, positive cuts (ValueError in one line otherwise)."""
    if not bounds or len(bounds) > 20:
        raise ValueError("--gap-bounds takes 1 to 20 seconds, increasing: 10,60,300")
    if any(not np.isfinite(b) or b <= 0 for b in bounds) or list(bounds) != sorted(set(bounds)):
        shown = ",".join(f"{b:g}" for b in bounds)
        raise ValueError(f"--gap-bounds {shown}: give positive seconds, strictly increasing")
    return bounds


def load_gap_buckets(
    con: duckdb.DuckDBPyConnection, trace: Trace, bounds: tuple[float, ...] = DEFAULT_BOUNDS
) -> GapBuckets | None:
    """Each request's bucket in replay order; None when no request names a session (no row
    then: every miss would be in ``no session``)."""
    bounds = check_bounds(bounds)
    if not (has_column(con, "session_id") and has_column(con, "parent_session_id")):
        return None  # a requests table from before sessions were kept
    named = "SELECT EXISTS (SELECT 1 FROM requests WHERE session_id IS NOT NULL)"
    if not con.sql(named).fetchall()[0][0]:
        return None
    query = sql.load("simulate/session_gaps").replace("{replay_order}", REPLAY_ORDER)
    table = con.sql(query).to_arrow_table()
    if trace.request_ids is not None and not table["request_id"].combine_chunks().equals(
        trace.request_ids
    ):
        raise ValueError("the requests table changed while it was read: run again")
    has = np.asarray(table["has_session"].to_numpy(zero_copy_only=False), bool)
    gap = np.asarray(table["gap_s"].fill_null(np.nan).to_numpy(), np.float64)
    bucket = np.where(has, np.where(np.isnan(gap), 1, 2 + np.searchsorted(bounds, gap, "right")), 0)
    subagent = np.asarray(table["subagent"].to_numpy(zero_copy_only=False), bool)
    return GapBuckets(bounds, bucket.astype(np.int64), subagent)


def _short(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"

"""Per-tenant sums that every scenario of a run measures over the same requests, found once.

A window measures the same requests in every scenario (``grid.measure_replayed``): the fleet,
then each tenant with measured requests, and in the steady window each group's 20 batches of
requests for its confidence interval. What does not depend on the scenario (the groups, their
request and input-token counts, each request's batch) is computed here once per window; a
scenario then costs one gather and one ``bincount`` per column over the window's requests,
where a loop over tenants cost a gather per tenant and column (three fifths of the measure
step, 75 s at 250 M lookups and 37 scenarios). The sums are of integers, exact in float64 below
2**53, so every figure is the one the per-tenant loop gave.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.analysis.trace.steady import BATCHES, T_975


@dataclass(frozen=True, eq=False)
class Groups:
    """The requests ``rows`` (ascending) a window measures, grouped as ``index_groups`` groups
    them: the fleet (group 0), then each tenant with rows, in code order. ``code``: each row's
    group less one (its tenant's place among those present); ``batch``: each row's group-batch
    (``group · BATCHES + batch``, the batches of ``steady._ratios`` over the group's rows), or
    None where no interval is asked."""

    rows: np.ndarray
    names: tuple[str, ...]
    code: np.ndarray
    requests: np.ndarray  # per group
    inputs: np.ndarray  # per group, int64
    fleet_batch: np.ndarray | None
    batch: np.ndarray | None
    batch_inputs: np.ndarray | None  # per group-batch, float64

    def take(self, values: np.ndarray) -> np.ndarray:
        """``values[rows]``: a view where the rows are one run (every window is), else a copy."""
        rows = self.rows
        if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
            return values[rows[0] : rows[-1] + 1]
        return values[rows]

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per group, the sum of ``values`` (one per request of the trace) over its rows."""
        v = self.take(values)
        tenants = np.bincount(self.code, weights=v, minlength=len(self.names) - 1)
        return np.concatenate(([v.sum()], tenants))

    def intervals(self, tokens: np.ndarray) -> list[tuple[float, float] | None]:
        """Per group, ``steady.batch_means_ci`` of ``tokens`` (hit tokens per request) over its
        rows against their input tokens."""
        assert self.batch is not None and self.batch_inputs is not None
        assert self.fleet_batch is not None
        t = self.take(tokens).astype(float)
        hits = np.bincount(self.batch, weights=t, minlength=len(self.batch_inputs))
        hits[:BATCHES] = np.bincount(self.fleet_batch, weights=t, minlength=BATCHES)
        totals = self.sums(tokens)
        out: list[tuple[float, float] | None] = []
        for g in range(len(self.names)):
            if self.requests[g] < 2 * BATCHES:
                out.append(None)
                continue
            h = hits[g * BATCHES : (g + 1) * BATCHES]
            i = self.batch_inputs[g * BATCHES : (g + 1) * BATCHES]
            with np.errstate(invalid="ignore", divide="ignore"):
                rates = np.where(i > 0, h / np.maximum(i, 1), np.nan)
            rates = rates[~np.isnan(rates)]
            if len(rates) < 2:
                out.append(None)
                continue
            point = float(totals[g] / max(self.inputs[g], 1))
            spread = float(np.std(rates, ddof=1)) / np.sqrt(len(rates))
            half = T_975.get(len(rates) - 1, 1.96) * spread
            out.append((point - half, point + half))
        return out


def groups_of(trace: Trace, measured: np.ndarray, intervals: bool = False) -> Groups:
    """The window's groups over the requests ``measured`` (a mask); ``intervals``: with each
    group's batches."""
    rows = np.flatnonzero(measured)
    codes = trace.tenant_codes[rows]
    counts = np.bincount(codes, minlength=len(trace.tenants))
    present = np.flatnonzero(counts)
    place = np.full(len(trace.tenants), -1, np.int64)
    place[present] = np.arange(len(present))
    code = place[codes]
    names = (FLEET, *(trace.tenants[c] for c in present))
    requests = np.concatenate(([len(rows)], counts[present])).astype(np.int64)
    inp = trace.input_tokens[rows]
    inputs = np.concatenate(
        ([int(inp.sum())], np.bincount(code, weights=inp, minlength=len(present)))
    ).astype(np.int64)
    if not intervals:
        return Groups(rows, names, code, requests, inputs, None, None, None)
    fleet_batch = _batches(len(rows))
    batch = np.empty(len(rows), np.int64)
    order = np.argsort(code, kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts[present])))
    for g in range(len(present)):
        mine = order[starts[g] : starts[g + 1]]
        batch[mine] = (g + 1) * BATCHES + _batches(len(mine))
    batch_inputs = np.bincount(batch, weights=inp.astype(float), minlength=len(names) * BATCHES)
    batch_inputs[:BATCHES] = np.bincount(fleet_batch, weights=inp.astype(float), minlength=BATCHES)
    return Groups(rows, names, code, requests, inputs, fleet_batch, batch, batch_inputs)


def _batches(n: int) -> np.ndarray:
    """The batch of each of ``n`` rows in order: ``steady._ratios``' runs of near-equal counts."""
    bounds = np.linspace(0, n, BATCHES + 1).astype(np.int64)
    return np.searchsorted(bounds[1:], np.arange(n), side="right").astype(np.int64)


@dataclass(frozen=True, eq=False)
class Buckets:
    """The time-series buckets of every request, grouped as the fleet then each tenant with
    requests: per (group, bucket) present, in that order, its requests and input tokens; each
    request's place among the tenant rows (``code · width + bucket``)."""

    names: tuple[str, ...]
    bucket: np.ndarray
    tenant_key: np.ndarray
    width: int
    fleet_present: np.ndarray
    tenant_present: np.ndarray  # keys present, ascending: by tenant, then bucket
    requests: np.ndarray
    inputs: np.ndarray
    group: np.ndarray  # per (group, bucket) present: its group (int32)
    starts: np.ndarray  # per (group, bucket) present: its bucket

    def hits(self, tokens: np.ndarray) -> np.ndarray:
        """Hit tokens per (group, bucket) present, in the rows' order."""
        fleet = np.bincount(self.bucket, weights=tokens, minlength=self.width)
        tenant = np.bincount(self.tenant_key, weights=tokens)
        return np.concatenate((fleet[self.fleet_present], tenant[self.tenant_present])).astype(
            np.int64
        )


def buckets_of(trace: Trace, bucket: np.ndarray) -> Buckets:
    """``bucket``: each request's bucket (from 0)."""
    width = int(bucket.max()) + 1 if len(bucket) else 1
    key = trace.tenant_codes.astype(np.int64) * width + bucket
    n_fleet = np.bincount(bucket, minlength=width)
    fleet_present = np.flatnonzero(n_fleet)
    n_tenant = np.bincount(key)
    tenant_present = np.flatnonzero(n_tenant)
    inp = trace.input_tokens.astype(float)
    i_fleet = np.bincount(bucket, weights=inp, minlength=width)
    i_tenant = np.bincount(key, weights=inp)
    codes = np.unique(trace.tenant_codes)
    names = (FLEET, *(trace.tenants[c] for c in codes))
    place = (np.searchsorted(codes, tenant_present // width) + 1).astype(np.int32)
    return Buckets(
        names,
        bucket,
        key,
        width,
        fleet_present,
        tenant_present,
        np.concatenate((n_fleet[fleet_present], n_tenant[tenant_present])).astype(np.int64),
        np.concatenate((i_fleet[fleet_present], i_tenant[tenant_present])).astype(np.int64),
        np.concatenate((np.zeros(len(fleet_present), np.int32), place)),
        np.concatenate((fleet_present, tenant_present % width)),
    )

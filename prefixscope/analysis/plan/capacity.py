"""The smallest capacity whose hit rate reaches a target, from stored points, refined exactly
for LRU, and the value of the next GiB.

LRU is a stack algorithm: a lookup hits at capacity C exactly when its stack distance is at
most C, so every group's hit tokens never fall as C grows. Between the two stored points that
bracket the target, the exact curve (``curves/exact.py``, one pass per zoom) therefore finds the
smallest capacity itself. Other policies are not stack algorithms (FIFO's hit rate can fall as
the cache grows), so for them the answer is the smallest stored capacity that reaches the
target, and the rows say which stored points bracket it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.curves.depths import hit_capacities
from prefixscope.analysis.curves.exact import lru_curve
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import hit_tokens

#: Points per group in one zoom pass of the exact LRU search.
ZOOM_POINTS = 64


@dataclass(frozen=True)
class Point:
    """A stored result: a policy's token hit rate at a capacity, and where it is stored."""

    capacity_blocks: int
    token_hit_rate: float
    source_table: str
    source_run_id: str


@dataclass(frozen=True)
class Smallest:
    """The answer for one (tenant, policy): the smallest stored point reaching the target
    (``point``; None: none does), the stored capacity below it (``below``: 0 when none), the
    largest stored point, and — for LRU — the exact smallest capacity and its rate."""

    point: Point | None
    below: int
    largest: Point
    exact_blocks: int | None = None
    exact_rate: float | None = None


def smallest_stored(points: Sequence[Point], target: float) -> Smallest:
    """The smallest stored capacity whose rate reaches ``target`` (rates within 1e-12 count)."""
    ordered = sorted(points, key=lambda p: p.capacity_blocks)
    largest = ordered[-1]
    for i, p in enumerate(ordered):
        if p.token_hit_rate >= target - 1e-12:
            below = ordered[i - 1].capacity_blocks if i else 0
            return Smallest(p, below, largest)
    return Smallest(None, largest.capacity_blocks, largest)


def exact_lru(
    trace: Trace,
    mask: np.ndarray,
    brackets: dict[str, tuple[int, int]],
    target_hits: dict[str, float],
) -> dict[str, tuple[int, int]]:
    """Per group (``'*'`` or a tenant), the smallest capacity in ``(low, high]`` whose LRU hit
    tokens over the ``mask``ed requests reach ``target_hits``, and those hit tokens. ``high``
    must reach it. Zoom passes of the exact curve narrow every bracket at once."""
    found: dict[str, tuple[int, int]] = {}
    live = dict(brackets)
    while live:
        points = sorted(
            {
                int(c)
                for low, high in live.values()
                for c in np.unique(np.linspace(low + 1, high, min(ZOOM_POINTS, high - low)))
            }
        )
        curve = lru_curve(trace, np.array(points), ["all"], {"all": mask})
        by_name = {g.tenant: g.hit_tokens for g in curve.groups}
        for name in list(live):
            low, high = live[name]
            hits = by_name.get(name)
            if hits is None:  # no measured request of this tenant
                del live[name]
                continue
            inside = [(c, h) for c, h in zip(points, hits, strict=True) if low < c <= high]
            reach = [(c, h) for c, h in inside if h >= target_hits[name] - 1e-9]
            first = reach[0][0]
            before = max((c for c, _ in inside if c < first), default=low)
            if first - before <= 1:
                found[name] = (first, int(reach[0][1]))
                del live[name]
            else:
                live[name] = (before, first)
    return found


def fills(trace: Trace, capacity: int) -> bool:
    """Whether a cache of ``capacity`` blocks ever fills on this trace (LRU and FIFO hold
    ``min(C, distinct blocks seen)``): if not, nothing was evicted and the rate is a cold
    start, not a steady state. Every dense id is looked up, so the trace sees ``n_unique``
    distinct blocks in all (``curves.exact.filled_at`` at one capacity, without its pass)."""
    return capacity <= trace.n_unique


def marginal_per_gib(
    trace: Trace,
    hits: np.ndarray,
    hits_more: np.ndarray,
    mask: np.ndarray,
    groups: dict[str, np.ndarray],
    seconds: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> dict[str, float | None]:
    """Per group, the prefill GPU-seconds per hour of traffic that one more GiB of cache saves:
    the saving with ``hits_more`` (per-request hit tokens with the GiB) less the saving with
    ``hits`` (without it), both priced by ``seconds(new, cached)``, over the ``mask`` requests."""
    span = float(trace.times[mask].max() - trace.times[mask].min()) if mask.any() else 0.0
    inp = trace.input_tokens.astype(np.float64)
    full = np.asarray(seconds(inp, np.zeros_like(inp)))
    saved = []
    for h in (hits, hits_more):
        new = np.maximum(inp - h.astype(np.float64), 1.0)
        saved.append(full - np.asarray(seconds(new, inp - new)))
    out: dict[str, float | None] = {}
    for name, sel in groups.items():
        chosen = sel & mask
        delta = float(saved[1][chosen].sum() - saved[0][chosen].sum())
        out[name] = delta * 3600 / span if span > 0 else None
    return out


def hit_tokens_at(
    trace: Trace, pairs: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], np.ndarray]:
    """Per (policy, capacity), the simulator's hit tokens per request. LRU at every capacity
    from one stack pass (``curves/depths.py``: a stack algorithm's hits at C are the lookups
    of depth at most C, exactly its replay's); other policies replay once each."""
    out: dict[tuple[str, int], np.ndarray] = {}
    lru = [c for p, c in pairs if p == "lru"]
    if lru:
        depth = hit_capacities(trace)  # non-decreasing along each request
        for c in lru:
            seen = np.concatenate(([0], np.cumsum(depth <= c)))
            blocks = seen[trace.offsets[1:]] - seen[trace.offsets[:-1]]
            out[("lru", c)] = hit_tokens(trace, blocks)
    for p, c in pairs:
        if p != "lru":
            out[(p, c)] = hit_tokens(trace, POLICIES[p].hit_blocks(trace, c))
    return out

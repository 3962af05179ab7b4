"""The engine's KV cache events beside a simulated pool: which blocks each holds over time, in
which order each evicts, and the capacity at which they agree best (``validate --events``).

Both sides are streams of (time, stored | removed | cleared, block): the engine's from
``kv_events`` (GPU medium, one rank), the pool's from a :mod:`.pool` model replaying the request
log. Each is replayed into the set of blocks it holds, sampled at the end of each time window
of the engine's span; blocks are compared by prefixscope id, so an engine block without one
(a chain begun before the capture, an output block) is left out of the comparison and counted.

Figures, pooled over the windows:

- ``engine_held_share``: of the blocks the engine held, the share the pool held too;
- ``sim_held_share``: of the blocks the pool held, the share the engine held too;
- ``jaccard``: both over either; what the capacity scan maximises;
- eviction order: the k-th removal of a block in the engine's stream is paired with the k-th
  eviction of the same block in the pool's (both within the engine's span);
  ``removal_match_share`` is the share of the engine's removals that have a pair, and
  ``kendall_tau`` the rank correlation of the paired removals' positions in the two orders
  (1: the same order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numba
import numpy as np

from prefixscope.analysis.validate.pool import (
    EVICTED,
    PoolModel,
    PoolRequests,
    PoolRun,
    ServiceModel,
)

STORED_KIND, REMOVED_KIND, CLEARED_KIND = 0, 1, 2
#: Times within this of each other are the same instant: both sides' times pass through
#: microsecond timestamps and float seconds, which move one by a microsecond or two.
TIME_SLACK_S = 1e-3


@dataclass(frozen=True)
class EngineStream:
    """One rank's events in the publisher's order: epoch seconds, kind, the block's
    prefixscope id (valid where ``linked``) and a key that names the engine's block (its
    engine hash, as a dense int) for blocks with no id."""

    t: np.ndarray
    kind: np.ndarray
    block_id: np.ndarray
    linked: np.ndarray
    key: np.ndarray

    @property
    def span(self) -> tuple[float, float]:
        return float(self.t[0]), float(self.t[-1])

    def peak_held(self) -> int:
        """The most blocks the engine held at once (linked or not): a floor for its pool."""
        held: set[int] = set()
        peak = 0
        for kind, key in zip(self.kind.tolist(), self.key.tolist(), strict=True):
            if kind == STORED_KIND:
                held.add(key)
                peak = max(peak, len(held))
            elif kind == REMOVED_KIND:
                held.discard(key)
            else:
                held.clear()
        return peak


@dataclass(frozen=True)
class Agreement:
    """One capacity's agreement with the engine (the module's figures)."""

    capacity: int
    windows: int
    engine_blocks: int
    sim_blocks: int
    both_blocks: int
    engine_removals: int
    sim_evictions: int
    removals_matched: int
    kendall_tau: float | None
    waited: int
    per_window: tuple[tuple[float, int, int, int], ...]  # (end, engine, sim, both)

    @property
    def engine_held_share(self) -> float | None:
        return self.both_blocks / self.engine_blocks if self.engine_blocks else None

    @property
    def sim_held_share(self) -> float | None:
        return self.both_blocks / self.sim_blocks if self.sim_blocks else None

    @property
    def jaccard(self) -> float:
        either = self.engine_blocks + self.sim_blocks - self.both_blocks
        return self.both_blocks / either if either else 1.0

    @property
    def removal_match_share(self) -> float | None:
        return self.removals_matched / self.engine_removals if self.engine_removals else None


def window_ends(stream: EngineStream, windows: int) -> np.ndarray:
    """The ends of ``windows`` equal windows over the engine's span."""
    start, end = stream.span
    return np.linspace(start, end, windows + 1)[1:]


def _held_at(ops: list[tuple[float, int, int]], ends: np.ndarray) -> list[set[int]]:
    """The held set after every op with time <= each end (ops in their own order)."""
    held: set[int] = set()
    out = []
    j = 0
    for end in ends.tolist():
        while j < len(ops) and ops[j][0] <= end + TIME_SLACK_S:
            _, kind, b = ops[j]
            if kind == STORED_KIND:
                held.add(b)
            elif kind == REMOVED_KIND:
                held.discard(b)
            else:
                held.clear()
            j += 1
        out.append(set(held))
    return out


def engine_ops(stream: EngineStream) -> list[tuple[float, int, int]]:
    """The engine's ops on linked blocks (and its clears)."""
    keep = stream.linked | (stream.kind == CLEARED_KIND)
    return list(
        zip(
            stream.t[keep].tolist(),
            stream.kind[keep].tolist(),
            stream.block_id[keep].tolist(),
            strict=True,
        )
    )


def compare(stream: EngineStream, run: PoolRun, ends: np.ndarray, capacity: int) -> Agreement:
    """The agreement of one pool run with the engine's stream."""
    sim = [(t, REMOVED_KIND if k == EVICTED else STORED_KIND, b) for t, k, b, _, _ in run.ops]
    eng = engine_ops(stream)
    windows = []
    totals = np.zeros(3, np.int64)
    for end, e, s in zip(ends.tolist(), _held_at(eng, ends), _held_at(sim, ends), strict=True):
        both = len(e & s)
        windows.append((end, len(e), len(s), both))
        totals += (len(e), len(s), both)
    start, stop = stream.span
    engine_removed = [b for t, k, b in eng if k == REMOVED_KIND]
    lo, hi = start - TIME_SLACK_S, stop + TIME_SLACK_S
    sim_evicted = [b for t, k, b in sim if k == REMOVED_KIND and lo <= t <= hi]
    matched, tau = eviction_order(engine_removed, sim_evicted)
    return Agreement(
        capacity,
        len(ends),
        int(totals[0]),
        int(totals[1]),
        int(totals[2]),
        len(engine_removed),
        len(sim_evicted),
        matched,
        tau,
        run.waited,
        tuple(windows),
    )


def eviction_order(engine: list[int], sim: list[int]) -> tuple[int, float | None]:
    """Pairs the k-th removal of each block in ``engine`` with its k-th in ``sim``; returns
    the pairs found and the Kendall tau of their positions (None: fewer than 2 pairs)."""
    position: dict[tuple[int, int], int] = {}
    seen: dict[int, int] = {}
    for p, b in enumerate(sim):
        k = seen.get(b, 0)
        seen[b] = k + 1
        position[(b, k)] = p
    seen.clear()
    ys = []
    for b in engine:
        k = seen.get(b, 0)
        seen[b] = k + 1
        p = position.get((b, k))
        if p is not None:
            ys.append(p)
    n = len(ys)
    if n < 2:
        return n, None
    pairs = n * (n - 1) / 2
    return n, 1.0 - 2.0 * _inversions(np.asarray(ys, np.int64)) / pairs


@numba.njit(cache=True)
def _inversions(y: np.ndarray) -> int:  # pragma: no cover - compiled
    """Pairs i < j with y[i] > y[j] (y distinct), by a Fenwick tree over ranks."""
    order = np.argsort(y)
    rank = np.empty(y.size, np.int64)
    rank[order] = np.arange(y.size)
    tree = np.zeros(y.size + 1, np.int64)
    inv = 0
    for i in range(y.size - 1, -1, -1):
        r = rank[i]  # count the later ones ranked below it
        j = r
        while j > 0:
            inv += tree[j]
            j -= j & -j
        j = r + 1
        while j <= y.size:
            tree[j] += 1
            j += j & -j
    return inv


def default_capacities(peak: int) -> list[int]:
    """A coarse scan upward from just below the engine's peak held blocks."""
    grid = np.round(max(peak, 1) * np.geomspace(0.9, 2.5, 18)).astype(np.int64)
    return sorted({int(c) for c in grid if c >= 1})


def scan(
    stream: EngineStream,
    requests: PoolRequests,
    model: PoolModel,
    service: ServiceModel,
    ends: np.ndarray,
    capacities: list[int] | None = None,
) -> tuple[list[Agreement], Agreement]:
    """Every capacity's agreement and the best one (highest Jaccard; the smaller capacity
    among equals). Without ``capacities``: a coarse grid from the engine's peak, then a local
    search around the best one whose step shrinks fourfold down to one block."""
    results: dict[int, Agreement] = {}

    def at(c: int) -> Agreement:
        if c not in results:
            results[c] = compare(stream, model(requests, c, service), ends, c)
        return results[c]

    grid = capacities or default_capacities(stream.peak_held())
    for c in grid:
        at(c)
    if capacities is None:
        best = _best(results).capacity
        i = grid.index(best)
        step = max(grid[min(i + 1, len(grid) - 1)] - best, best - grid[max(i - 1, 0)], 4)
        while step > 1:
            step = max(step // 4, 1)
            for k in (-3, -2, -1, 1, 2, 3):
                if best + k * step >= 1:
                    at(best + k * step)
            best = _best(results).capacity
    ordered = [results[c] for c in sorted(results)]
    return ordered, _best(results)


def _best(results: dict[int, Agreement]) -> Agreement:
    return max(results.values(), key=lambda a: (round(a.jaccard, 12), -a.capacity))


def attribute_ranks(
    requests: PoolRequests, stored_t: np.ndarray, stored_rank: np.ndarray, stored_id: np.ndarray
) -> np.ndarray:
    """Which rank served each request, from where its blocks were stored: the rank of the
    earliest store of one of its blocks at or after its arrival (less one second of clock
    skew); else the rank that last stored its first block before it; else rank 0. A
    request that hit everything stores nothing, so it goes where its prefix was."""
    ranks = np.zeros(requests.n, np.int32)
    if len(np.unique(stored_rank)) <= 1:
        ranks[:] = stored_rank[0] if len(stored_rank) else 0
        return ranks
    order = np.lexsort((stored_t, stored_id))
    ids, ts, rk = stored_id[order], stored_t[order], stored_rank[order]
    for i in range(requests.n):
        blocks = requests.block_ids[requests.offsets[i] : requests.offsets[i + 1]]
        if len(blocks) == 0:
            continue
        arrival = float(requests.arrival_s[i]) - 1.0
        best_t, best_rank = np.inf, -1
        lo = np.searchsorted(ids, blocks, "left")
        hi = np.searchsorted(ids, blocks, "right")
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            k = a + int(np.searchsorted(ts[a:b], arrival, "left"))
            if k < b and ts[k] < best_t:
                best_t, best_rank = ts[k], int(rk[k])
        if best_rank < 0 and hi[0] > lo[0]:
            k = a0 = int(lo[0])
            k = a0 + int(np.searchsorted(ts[a0 : hi[0]], arrival + 1.0, "right")) - 1
            if k >= a0:
                best_rank = int(rk[k])
        ranks[i] = max(best_rank, 0)
    return ranks


def engine_cache(streams: Mapping[int, EngineStream], at: float) -> np.ndarray:
    """The blocks the engine's GPU pools held at epoch second ``at`` (every rank's, after its
    events up to then), by their last store, oldest first: prefixscope ids where the events
    link them, else an id of the engine's block of its own (:func:`_unlinked`)."""
    held: dict[tuple[int, int], tuple[float, int, int]] = {}  # (rank, block) -> (t, order, id)
    order = 0  # ties in time keep the events' order (a snapshot's chunks share one time)
    for rank, s in streams.items():
        mine: dict[int, tuple[float, int, int]] = {}
        upto = int(np.searchsorted(s.t, at + TIME_SLACK_S, side="right"))
        for t, kind, block, linked, key in zip(
            s.t[:upto].tolist(), s.kind[:upto].tolist(), s.block_id[:upto].tolist(),
            s.linked[:upto].tolist(), s.key[:upto].tolist(), strict=True,
        ):  # fmt: skip
            name = block if linked else _unlinked(rank, key)
            if kind == STORED_KIND:
                mine.pop(name, None)
                mine[name] = (t, order, name)
                order += 1
            elif kind == REMOVED_KIND:
                mine.pop(name, None)
            elif kind == CLEARED_KIND:
                mine.clear()
        held |= {(rank, name): value for name, value in mine.items()}
    ordered = sorted(held.values())
    return np.fromiter((name for _, _, name in ordered), np.uint64, len(ordered))


def _unlinked(rank: int, key: int) -> int:
    """An id for an engine block the events name without a prefixscope id: no request's, so
    it only takes room."""
    digest = hashlib.blake2b(f"unlinked:{rank}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")

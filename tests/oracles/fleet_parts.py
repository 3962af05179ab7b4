"""Pieces of the plain-Python fleet references (``reference.py``, ``reference_pool.py``):
routing, the recounted loads, the cache lists and the time-weighted per-replica fields."""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from typing import Any

import numpy as np

from prefixscope.analysis.fleet._records import HIST_BUCKETS
from prefixscope.analysis.fleet.assign import ring, session_keys
from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.fleet.run import Fleet, FleetOutcome, Traffic
from prefixscope.analysis.fleet.running import per_busy, weighted_p95
from prefixscope.analysis.trace.csr import Trace


def blocks_for(req: Any, tokens: int, block_size: int) -> int:
    """A sequence's blocks: its prompt's hashed ones, or more as its tokens outgrow them."""
    return max(len(req.blocks), -(-tokens // block_size))


def footprint(rep: Any, requests: list[Any], block_size: int) -> int:
    """The blocks the running requests need in this step: a started prefill its whole prompt,
    a decode its context (the positions this step attends to)."""
    started = sum(
        blocks_for(requests[q], requests[q].input_tokens, block_size)
        for q in rep.queue
        if requests[q].started
    )
    decoding = sum(
        blocks_for(requests[r], dec.context, block_size) for r, dec in rep.decoding.items()
    )
    return started + decoding


def outcome_of(
    fleet: Fleet, arrival: np.ndarray, requests: list[Any], replicas: list[Any], width: int
) -> FleetOutcome:
    """A reference's outcome from its request and replica records (both references keep the
    same fields), the running-blocks histogram at ``width`` blocks per bucket."""

    def per_request(name: str, dtype: type) -> np.ndarray:
        return np.array([getattr(q, name) for q in requests], dtype)

    def per_replica(name: str, dtype: type) -> np.ndarray:
        return np.array([getattr(p, name) for p in replicas], dtype)

    n = len(requests)
    return FleetOutcome(
        fleet=fleet,
        arrival=arrival,
        replica=per_request("replica", np.int32),
        hit_blocks=per_request("hit_blocks", np.int32),
        hit_tokens=per_request("hit_tokens", np.int64),
        ttft=per_request("ttft", np.float64),
        first_start=per_request("first_start", np.float64),
        done_at=per_request("done_at", np.float64),
        busy=per_replica("busy", np.float64),
        steps=per_replica("steps", np.int64),
        prefill_tokens=per_replica("prefill_tokens", np.int64),
        decode_tokens=per_replica("decode_tokens", np.int64),
        filled_at=per_replica("filled_at", np.int64),
        drained_at=per_replica("now", np.float64),
        source_tokens=np.array([q.source_tokens for q in requests], np.int64).reshape(n, 3),
        source_saved_s=np.array([q.source_saved for q in requests], np.float64).reshape(n, 3),
        transfer_s=per_request("transfer", np.float64),
        no_cache_s=per_request("no_cache", np.float64),
        preempted=np.array([q.preempted for q in requests], np.int64).reshape(n, 3),
        **time_weighted(replicas, width),
    )


def time_weighted(replicas: list[Any], width: int) -> dict[str, np.ndarray]:
    """The outcome's per-replica time-weighted fields from the replicas' sums."""
    busy = np.array([p.busy for p in replicas], np.float64)
    hist = np.zeros((len(replicas), HIST_BUCKETS), np.float64)
    for i, p in enumerate(replicas):
        for bucket, seconds in p.hist.items():
            hist[i, bucket] = seconds
    pre = np.array([getattr(p, "preemptions", 0) for p in replicas], np.int64)
    return {
        "preemptions": pre,
        "running_blocks_mean": per_busy(np.array([p.running_s for p in replicas]), busy),
        "running_blocks_p95": weighted_p95(hist, width),
        "prefix_cache_blocks_mean": per_busy(np.array([p.cached_s for p in replicas]), busy),
    }


def _queued_prefill(rep: Any, requests: list[Any]) -> int:
    return sum(requests[q].to_prefill for q in rep.queue)


def _decode_context(rep: Any) -> int:
    return sum(dec.context for dec in rep.decoding.values())


def _argmin(values: list[float] | list[int], first: int) -> int:
    """The index of the smallest value; ties go to the first counting from ``first``
    (rotating)."""
    n = len(values)
    order = [(first + j) % n for j in range(n)]
    return min(order, key=lambda i: values[i])  # min keeps the first of equals


def _leading_run(blocks: list[int], held: OrderedDict[int, None]) -> int:
    k = 0
    while k < len(blocks) and blocks[k] in held:
        k += 1
    return k


def _touch(held: OrderedDict[int, None], blocks: list[int], refresh: bool) -> None:
    """Insert the blocks deepest first (so the deepest leaves first); a block already held
    moves to the back only when ``refresh``."""
    for b in reversed(blocks):
        if b not in held:
            held[b] = None
        elif refresh:
            held.move_to_end(b)


def _evict(held: OrderedDict[int, None], limit: int) -> None:
    while len(held) > limit:
        held.popitem(last=False)


def _fixed_routing(
    trace: Trace, traffic: Traffic, router: str, n_rep: int, settings: RouterSettings
) -> list[int] | None:
    """Round-robin, random and session: the replica of every request before anything runs
    (None for a stateful router)."""
    if not resolve_router(router).fixed:
        return None
    n = trace.n_requests
    if router == "round-robin":
        return [r % n_rep for r in range(n)]
    if router == "random":
        return [int(i) for i in np.random.default_rng(settings.seed).integers(0, n_rep, n)]
    if router != "session":
        raise ValueError(f"no reference for router {router!r}")
    points, owner = ring(n_rep, settings.virtual_nodes)
    points_list = [int(p) for p in points]
    keys = session_keys(trace, traffic.sessions, settings)
    count = [0] * n_rep
    out = []
    for r in range(n):
        bound = math.ceil(settings.balance_factor * (r + 1) / n_rep)
        j = bisect.bisect_left(points_list, int(keys[r])) % len(points_list)
        while count[owner[j]] >= bound:  # clockwise to the first replica under its bound
            j = (j + 1) % len(points_list)
        out.append(int(owner[j]))
        count[owner[j]] += 1
    return out

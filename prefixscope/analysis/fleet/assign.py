"""Fixed routing: the replica of every request from the request alone and what was routed
before it (round-robin, random, session), computed before any cache is simulated."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numba
import numpy as np

from prefixscope.analysis.fleet.routers import RouterSettings, resolve_router
from prefixscope.analysis.trace.csr import Trace

MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """A 64-bit mixer (Steele, Lea and Flood's SplitMix64 finaliser): spreads keys over the
    ring whatever their structure."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def session_keys(
    trace: Trace, sessions: Sequence[str | None] | None, settings: RouterSettings
) -> np.ndarray:
    """Per request, the key ``session`` hashes (uint64): its session id when it has one, else
    its first k blocks' prefix, named by where the trace first looked up its k-th block (a
    chained block stands for the whole prefix before it). Where, not the stored hash: the
    hashes are keyed (``ingest/hashkey.py``), and no route may depend on the key."""
    k = settings.session_blocks
    n_blocks = trace.blocks_per_request
    last = trace.offsets[:-1] + np.minimum(n_blocks, k) - 1
    if trace.n_lookups == 0:  # no request holds a whole block: only session ids key them
        prefix = np.zeros(trace.n_requests, np.uint64)
    else:
        first = first_of_hash(trace, np.maximum(last, 0)).astype(np.uint64)
        prefix = np.where(n_blocks > 0, first + np.uint64(1), np.uint64(0))
    keys = prefix.astype(np.uint64)
    if sessions is not None:
        ids = np.asarray(sessions, dtype=object)
        present = np.array([s is not None and s == s for s in ids], dtype=bool)
        if present.any():
            names, inverse = np.unique(ids[present].astype(str), return_inverse=True)
            hashed = np.array(
                [
                    int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
                    for s in names
                ],
                dtype=np.uint64,
            )
            keys[present] = hashed[inverse.ravel()]
    return mix(keys)


def first_of_hash(trace: Trace, lookups: np.ndarray) -> np.ndarray:
    """Per lookup position, the first position whose block has the same hash. Where ids
    repeat, an id names one hash (``csr.dense_ids``), so that is the id's first lookup;
    where every lookup has an id of its own (prefix caching off, ``plan/nocache.py``, whose
    ids keep their blocks' hashes) the hashes themselves are matched, so a prompt is named
    as it is with caching on."""
    if trace.n_unique < trace.n_lookups:
        return trace.first_lookup[trace.blocks[lookups]]
    values = trace.hashes[trace.blocks]
    distinct, first = np.unique(values, return_index=True)
    return first[np.searchsorted(distinct, values[lookups])]


def mix(keys: np.ndarray) -> np.ndarray:
    """:func:`splitmix64` over a uint64 array (numpy's uint64 products wrap, as the finaliser
    wants)."""
    x = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def ring(n_replicas: int, virtual_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The hash ring: sorted points and the replica owning each."""
    points = np.array(
        [splitmix64((i << 32) | v) for i in range(n_replicas) for v in range(virtual_nodes)],
        dtype=np.uint64,
    )
    owner = np.repeat(np.arange(n_replicas, dtype=np.int32), virtual_nodes)
    order = np.argsort(points, kind="stable")
    return points[order], owner[order]


@numba.njit(cache=True, nogil=True)
def _bounded(keys, points, owner, n_replicas, factor):  # type: ignore[no-untyped-def]
    """Each key goes to the first replica clockwise from its point whose count is below
    ⌈factor · (routed + 1) / n⌉ (Mirrokni, Thorup and Zadimoghaddam)."""
    n = keys.size
    out = np.empty(n, np.int32)
    count = np.zeros(n_replicas, np.int64)
    m = points.size
    for r in range(n):
        cap = np.ceil(factor * (r + 1) / n_replicas)
        j = np.searchsorted(points, keys[r]) % m
        while count[owner[j]] >= cap:
            j = (j + 1) % m
        out[r] = owner[j]
        count[owner[j]] += 1
    return out


def assign(
    trace: Trace,
    router: str,
    n_replicas: int,
    settings: RouterSettings,
    sessions: Sequence[str | None] | None = None,
) -> np.ndarray:
    """The replica of every request (int32) under a fixed router."""
    if not resolve_router(router).fixed:
        raise ValueError(f"{router} routes on the replicas' state; it has no fixed assignment")
    n = trace.n_requests
    if router == "round-robin":
        return (np.arange(n) % n_replicas).astype(np.int32)
    if router == "random":
        rng = np.random.default_rng(settings.seed)
        return rng.integers(0, n_replicas, n).astype(np.int32)
    points, owner = ring(n_replicas, settings.virtual_nodes)
    keys = session_keys(trace, sessions, settings)
    return _bounded(keys, points, owner, n_replicas, float(settings.balance_factor))

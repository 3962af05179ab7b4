"""Why one request's blocks hit or missed, block by block (``prefixscope explain``).

For request ``r`` and each of its blocks: the last earlier request that looked the block up (and
how it relates to ``r``: same session, another session, another tenant), the block's LRU stack
depth when ``r`` arrives, whether it was cached, and why it hit or missed:

- ``hit``: in the leading run of cached blocks (the request cycle of docs/simulation.md);
- ``never seen``: no earlier request looked it up, so no cache could hold it;
- ``evicted``: looked up before, gone when ``r`` arrived (for LRU: its depth exceeds the
  capacity); ``expired`` under ``ttl`` when it sat idle longer than ``--ttl``;
- ``after the first miss``: past the first miss, so not served even when cached (the
  leading-run rule; ``cached`` still says whether it was).

Stack depth is recency, whatever the policy: the number of distinct blocks touched at or after
the block's latest touch, itself included. A request touches its blocks deepest first (the LRU
kernel's tie rule), so its first block is its most recent. LRU is a stack algorithm: after every
request the cache of capacity C holds exactly the C most recent blocks, so under ``lru`` a block
is cached iff its depth is at most C, and the leading hits equal ``LRU.hit_blocks`` (tested).
Under another policy the hit count comes from that policy's own replay, and whether a block past
the first miss was cached is not known (``cached`` None), except for ``ceiling`` (every block
ever seen is cached).

One pass over the lookups before ``r``: each block's latest touch position (a max-scatter),
then a depth is a rank among the latest touches (a sort): O(n log n), a few milliseconds on
the bundled trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.trace.csr import Trace

REASONS = ("hit", "never seen", "evicted", "expired", "after the first miss")
#: How the last user of a block relates to the request: ``same tenant`` when sessions are not
#: known for both.
RELATIONS = ("same session", "other session", "same tenant", "other tenant")


@dataclass(frozen=True)
class Recency:
    """Per block of one request, on its arrival: the last earlier request that looked it up
    (-1: none) and its LRU stack depth (0: never seen)."""

    last_request: np.ndarray  # int64
    depth: np.ndarray  # int64


@dataclass(frozen=True)
class BlockWhy:
    """One block of the explained request."""

    position: int
    block_hash: int
    hit: bool
    cached: bool | None  # in the cache on arrival; None: the policy's replay does not say
    reason: str  # one of REASONS
    depth: int | None  # LRU stack depth on arrival; None: never seen
    last_request: int | None  # index (replay order) of the last earlier request using it
    last_ago_s: float | None  # seconds from that request's arrival to this one's
    last_by: str | None  # one of RELATIONS


@dataclass(frozen=True)
class Explanation:
    request: int  # index in replay order
    policy: str
    capacity_blocks: int | None
    hit_blocks: int  # the leading run of cached blocks
    hit_tokens: int  # the tokens they serve (``Trace.served_sizes``, as hit_tokens counts)
    input_tokens: int
    blocks: tuple[BlockWhy, ...]
    #: The engine recomputes the last block even when cached (vLLM's last-token rule for token
    #: sources, ``Trace.recomputes_last_block``): a hit there serves no tokens.
    recomputes_last_block: bool

    @property
    def first_miss(self) -> BlockWhy | None:
        return self.blocks[self.hit_blocks] if self.hit_blocks < len(self.blocks) else None


def recency(trace: Trace, r: int) -> Recency:
    """Last use and stack depth of request ``r``'s blocks, from the lookups before it."""
    start, end = int(trace.offsets[r]), int(trace.offsets[r + 1])
    own = trace.blocks[start:end]
    if start == 0:
        none = np.full(len(own), -1, np.int64)
        return Recency(none, np.zeros(len(own), np.int64))
    request = trace.request_of_lookup[:start]
    # Touch position of each earlier lookup: requests in order, each one's blocks deepest first.
    touch = trace.offsets[request] + trace.offsets[request + 1] - 1 - np.arange(start)
    latest = np.full(trace.n_unique, -1, np.int64)
    np.maximum.at(latest, trace.blocks[:start], touch)
    live = np.sort(latest[latest >= 0])  # one latest touch per block seen
    mine = latest[own]
    seen = mine >= 0
    depth = np.where(seen, len(live) - np.searchsorted(live, mine), 0)
    by_touch = np.empty(start, np.int64)
    by_touch[touch] = request  # touch is a permutation of 0 .. start-1
    last = np.where(seen, by_touch[np.maximum(mine, 0)], -1)
    return Recency(last.astype(np.int64), depth.astype(np.int64))


def lru_hits(depth: np.ndarray, capacity: int) -> int:
    """The leading run of blocks cached under LRU: seen, and at most ``capacity`` deep."""
    cached = (depth > 0) & (depth <= capacity)
    return int(np.argmin(cached)) if not cached.all() else len(cached)


def relation(trace: Trace, session: np.ndarray | None, q: int, r: int) -> str:
    """How request ``q`` relates to request ``r`` (``session``: a code per request, -1:
    unknown)."""
    if trace.tenant_codes[q] != trace.tenant_codes[r]:
        return "other tenant"
    if session is None or session[q] < 0 or session[r] < 0:
        return "same tenant"
    return "same session" if session[q] == session[r] else "other session"


def explain(
    trace: Trace,
    r: int,
    policy: str = "lru",
    capacity_blocks: int | None = None,
    session: np.ndarray | None = None,
    options: PolicyOptions | None = None,
) -> Explanation:
    """Request ``r`` (index in replay order) under ``policy`` at ``capacity_blocks``."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} — choose one of {', '.join(POLICIES)}")
    if not 0 <= r < trace.n_requests:
        raise ValueError(f"request index {r} is outside 0..{trace.n_requests - 1}")
    bounded = POLICIES[policy].bounded
    if bounded and (capacity_blocks is None or capacity_blocks < 1):
        raise ValueError(f"{policy} needs a capacity of at least 1 block, got {capacity_blocks}")
    capacity = capacity_blocks if bounded else None
    rec = recency(trace, r)
    seen = rec.depth > 0
    if policy == "lru":
        cached: list[bool | None] = [bool(c) for c in seen & (rec.depth <= capacity)]  # type: ignore[operator]
        hits = lru_hits(rec.depth, capacity)  # type: ignore[arg-type]
    else:
        hits = int(POLICIES[policy].hit_blocks(trace, capacity, options or PolicyOptions())[r])
        # Hits are cached, the first miss is not, nor is a block never seen; past the first
        # miss only ceiling (which keeps everything seen) says.
        exact = policy == "ceiling"
        cached = [
            i < hits if i <= hits or not s else (True if exact else None)
            for i, s in enumerate(seen)
        ]
    ttl = options.ttl_s if options is not None and policy == "ttl" else None
    hashes = trace.hashes[trace.blocks[trace.offsets[r] : trace.offsets[r + 1]]]
    rows = []
    for i, (q, d) in enumerate(zip(rec.last_request.tolist(), rec.depth.tolist(), strict=True)):
        ago = float(trace.times[r] - trace.times[q]) if q >= 0 else None
        if i < hits:
            reason = "hit"
        elif i > hits:
            reason = "after the first miss"
        elif q < 0:
            reason = "never seen"
        else:
            reason = "expired" if ttl is not None and ago > ttl else "evicted"  # type: ignore[operator]
        rows.append(
            BlockWhy(
                position=i,
                block_hash=int(hashes[i]),
                hit=i < hits,
                cached=cached[i],
                reason=reason,
                depth=d if q >= 0 else None,
                last_request=q if q >= 0 else None,
                last_ago_s=ago,
                last_by=relation(trace, session, q, r) if q >= 0 else None,
            )
        )
    return Explanation(
        request=r,
        policy=policy,
        capacity_blocks=capacity,
        hit_blocks=hits,
        hit_tokens=int(trace.served_sizes[trace.offsets[r] : trace.offsets[r] + hits].sum()),
        input_tokens=int(trace.input_tokens[r]),
        blocks=tuple(rows),
        recomputes_last_block=bool(trace.recomputes_last_block[r]),
    )

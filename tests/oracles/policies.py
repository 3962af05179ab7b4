"""Reference policies in plain Python: the test oracle for the compiled and vectorized ones.

Written for obviousness, not speed: the cache is a dict, and each eviction scans every cached
block for the one the policy's rule names (S3-FIFO, a set of queues, is spelled out with deques).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class _Block:
    owner: int
    inserted: int  # touch number at insertion
    touched: int  # last touch number
    last_time: float
    uses: int = 0


@dataclass
class ReferenceResult:
    hit_blocks: list[int]
    cross: list[bool] = field(default_factory=list)  # per lookup, in trace order
    filled_at: int = -1  # the first request after which the cache held its capacity


def reference_replay(
    policy: str,
    requests: Sequence[Sequence[int]],
    capacity: int | None,
    tenants: Sequence[int] | None = None,
    times: Sequence[float] | None = None,
    ttl: float | None = None,
    pinned: frozenset[int] = frozenset(),
    sessions: Sequence[int | None] | None = None,
) -> ReferenceResult:
    """Replay ``requests`` (lists of block ids) under ``policy``; see docs/simulation.md.
    ``sessions``: per request its session (None: a session of its own), for ``session`` and
    ``liveness``."""
    n = len(requests)
    tenants = tenants if tenants is not None else [0] * n
    times = times if times is not None else list(range(n))
    if policy in ("session", "liveness"):
        named = sessions if sessions is not None else [None] * n
        own = [("alone", r) if s is None else ("named", s) for r, s in enumerate(named)]
        return _sessions(policy, requests, capacity, tenants, times, own)  # type: ignore[arg-type]
    if policy == "s3fifo":
        return _s3fifo(requests, capacity, tenants)  # type: ignore[arg-type]
    parent = _parents(requests)

    def next_use(b: int, r: int) -> int:
        return next((q for q in range(r + 1, n) if b in requests[q]), n)

    cache: dict[int, _Block] = {}
    result = ReferenceResult([])
    clock = 0
    for r, blocks in enumerate(requests):
        if policy == "ttl":
            for b in [b for b, s in cache.items() if times[r] - s.last_time > ttl]:  # type: ignore[operator]
                del cache[b]
        _look_up(cache, blocks, tenants[r], result)
        for b in reversed(blocks):
            clock += 1
            if b in cache:
                cache[b].touched, cache[b].last_time = clock, times[r]
                cache[b].uses += 1
            else:
                cache[b] = _Block(tenants[r], clock, clock, times[r])
        if policy == "ceiling":
            continue
        while len(cache) > capacity:  # type: ignore[operator]
            cached_children = {parent[c] for c in cache}
            candidates = {
                "lru": lambda b: (cache[b].touched,),
                "ttl": lambda b: (cache[b].touched,),
                "pinned": lambda b: (cache[b].touched,),
                "fifo": lambda b: (cache[b].inserted,),
                "lfu": lambda b: (cache[b].uses, cache[b].touched),
                "belady": lambda b, r=r: (-next_use(b, r), cache[b].touched),
            }
            key = candidates[policy]
            eligible = [
                b
                for b in cache
                if not (policy == "pinned" and b in pinned)
                and not (policy == "belady" and b in cached_children)
            ]
            if not eligible:
                break
            del cache[min(eligible, key=key)]
        if result.filled_at == -1 and len(cache) >= capacity:  # type: ignore[operator]
            result.filled_at = r
    return result


def _parents(requests: Sequence[Sequence[int]]) -> dict[int, int]:
    """Each block's parent: the block before it where it is first looked up (-1: a first)."""
    parent: dict[int, int] = {}
    for blocks in requests:
        for i, b in enumerate(blocks):
            parent.setdefault(b, blocks[i - 1] if i else -1)
    return parent


def _look_up(
    cache: dict[int, _Block], blocks: Sequence[int], tenant: int, result: ReferenceResult
) -> None:
    """The request's leading run of cached blocks, and which of its hits crossed tenants."""
    k = 0
    while k < len(blocks) and blocks[k] in cache:
        k += 1
    result.hit_blocks.append(k)
    result.cross += [i < k and cache[b].owner != tenant for i, b in enumerate(blocks)]


def _sessions(
    policy: str,
    requests: Sequence[Sequence[int]],
    capacity: int,
    tenants: Sequence[int],
    times: Sequence[float],
    sessions: Sequence[object],
) -> ReferenceResult:
    """``session`` and ``liveness`` read off their definitions (policies/sessions.py): each
    eviction scans every cached leaf for the smallest key."""
    parent = _parents(requests)
    last_r: dict[object, int] = {}
    last_t: dict[object, float] = {}
    longest: dict[object, float] = {}
    cache: dict[int, _Block] = {}
    owner: dict[int, object] = {}
    result = ReferenceResult([])
    clock = 0
    for r, blocks in enumerate(requests):
        s, now = sessions[r], times[r]
        if s in last_r:
            longest[s] = max(longest.get(s, 0.0), now - last_t[s])
        last_r[s], last_t[s] = r, now
        _look_up(cache, blocks, tenants[r], result)
        for b in reversed(blocks):
            clock += 1
            if b not in cache:
                cache[b] = _Block(tenants[r], clock, clock, now)
            cache[b].touched = clock
            owner[b] = s
        while len(cache) > capacity:
            with_children = {parent[c] for c in cache}
            leaves = [b for b in cache if b not in with_children]

            def gone_at(b: int) -> float:
                o = owner[b]
                return last_t[o] + max(60.0, 2.0 * longest.get(o, 0.0))

            gone = [b for b in leaves if policy == "liveness" and gone_at(b) < now]
            if gone:
                victim = min(gone, key=lambda b: (gone_at(b), cache[b].touched))
            else:
                victim = min(leaves, key=lambda b: (last_r[owner[b]], cache[b].touched))
            del cache[victim]
        if result.filled_at == -1 and len(cache) >= capacity:
            result.filled_at = r
    return result


def _s3fifo(
    requests: Sequence[Sequence[int]], capacity: int, tenants: Sequence[int]
) -> ReferenceResult:
    small_cap = max(1, capacity // 10)
    ghost_cap = max(1, capacity - small_cap)
    parent = _parents(requests)
    small: deque[int] = deque()  # left: the head, the oldest
    main: deque[int] = deque()
    ghost: deque[int] = deque()
    freq: dict[int, int] = {}
    owner: dict[int, int] = {}
    result = ReferenceResult([])

    def in_use(b: int) -> bool:  # it has a cached child
        return any(parent[c] == b for c in (*small, *main))

    def from_small() -> int | None:
        for _ in range(len(small)):
            v = small.popleft()
            if in_use(v) or freq[v] > 1:
                main.append(v)
                continue
            ghost.append(v)
            if len(ghost) > ghost_cap:
                ghost.popleft()
            return v
        return None

    def from_main() -> int | None:
        for _ in range(4 * len(main) + 1):
            if not main:
                break
            v = main.popleft()
            if in_use(v) or freq[v] > 0:
                if not in_use(v):
                    freq[v] -= 1
                main.append(v)
                continue
            return v
        return None

    for r, blocks in enumerate(requests):
        in_cache = set(small) | set(main)
        k = 0
        while k < len(blocks) and blocks[k] in in_cache:
            k += 1
        result.hit_blocks.append(k)
        result.cross += [i < k and owner[b] != tenants[r] for i, b in enumerate(blocks)]
        for b in reversed(blocks):
            if b in small or b in main:
                freq[b] = min(freq[b] + 1, 3)
                continue
            freq[b], owner[b] = 0, tenants[r]
            if b in ghost:
                ghost.remove(b)
                main.append(b)
            else:
                small.append(b)
        while len(small) + len(main) > capacity:
            victim = None
            if len(small) >= small_cap:
                victim = from_small()
            if victim is None:
                victim = from_main()
            if victim is None:  # M holds only blocks in use: S gives one, whatever its share
                victim = from_small()
        if result.filled_at == -1 and len(small) + len(main) >= capacity:
            result.filled_at = r
    return result


def reference_lru(requests: Sequence[Sequence[int]], capacity: int) -> list[int]:
    """LRU in linear time, for whole traces: touching a request's blocks deepest first puts them
    in key order, so an ``OrderedDict`` kept in touch order has the victim first."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = []
    for blocks in requests:
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        hits.append(k)
        for block in reversed(blocks):
            cache[block] = None
            cache.move_to_end(block)
        while len(cache) > capacity:
            cache.popitem(last=False)
    return hits


def reference_hit_blocks(
    policy: str, requests: Sequence[Sequence[int]], capacity: int | None
) -> list[int]:
    """Per request, the leading run of its blocks cached on arrival, under ``policy``."""
    if policy not in ("ceiling", "lru", "fifo", "lfu", "belady", "s3fifo"):
        raise ValueError(f"no reference for policy {policy!r} without options")
    if policy != "ceiling" and (capacity is None or capacity < 1):
        raise ValueError(f"{policy} needs a capacity of at least one block")
    if policy == "lru":
        return reference_lru(requests, capacity)  # type: ignore[arg-type]
    return reference_replay(policy, requests, capacity).hit_blocks

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


class S3FIFOCache:
    """S3-FIFO kept prefix-closed, one request at a time: :func:`reference_replay`'s, and the
    fleet oracle's per replica. ``parent``: each block's (``_parents``)."""

    def __init__(self, capacity: int, parent: dict[int, int]) -> None:
        self.capacity = capacity
        self.small_cap = max(1, capacity // 10)
        self.ghost_cap = max(1, capacity - self.small_cap)
        self.parent = parent
        self.small: deque[int] = deque()  # left: the head, the oldest
        self.main: deque[int] = deque()
        self.ghost: deque[int] = deque()
        self.freq: dict[int, int] = {}
        self.owner: dict[int, int] = {}

    def __contains__(self, b: object) -> bool:
        return b in self.small or b in self.main

    def __len__(self) -> int:
        return len(self.small) + len(self.main)

    def _in_use(self, b: int) -> bool:  # it has a cached child
        return any(self.parent[c] == b for c in (*self.small, *self.main))

    def _from_small(self) -> int | None:
        for _ in range(len(self.small)):
            v = self.small.popleft()
            if self._in_use(v) or self.freq[v] > 1:
                self.main.append(v)
                continue
            self.ghost.append(v)
            if len(self.ghost) > self.ghost_cap:
                self.ghost.popleft()
            return v
        return None

    def _from_main(self) -> int | None:
        for _ in range(4 * len(self.main) + 1):
            if not self.main:
                break
            v = self.main.popleft()
            if self._in_use(v) or self.freq[v] > 0:
                if not self._in_use(v):
                    self.freq[v] -= 1
                self.main.append(v)
                continue
            return v
        return None

    def touch(self, blocks: Sequence[int], tenant: int = 0) -> None:
        for b in reversed(blocks):
            if b in self:
                self.freq[b] = min(self.freq[b] + 1, 3)
                continue
            self.freq[b], self.owner[b] = 0, tenant
            if b in self.ghost:
                self.ghost.remove(b)
                self.main.append(b)
            else:
                self.small.append(b)

    def evict(self) -> list[int]:
        """Evict while over capacity; the victims, in the order they left."""
        victims = []
        while len(self) > self.capacity:
            victim = None
            if len(self.small) >= self.small_cap:
                victim = self._from_small()
            if victim is None:
                victim = self._from_main()
            if victim is None:  # M holds only blocks in use: S gives one, whatever its share
                victim = self._from_small()
            if victim is not None:
                victims.append(victim)
        return victims


class LFUCache:
    """LFU, one request at a time (the fleet oracle's per replica): evict the fewest uses while
    cached, ties by least recent touch, as :func:`reference_replay` does."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: dict[int, list[int]] = {}  # block -> [uses, last touch]
        self.clock = 0

    def __contains__(self, b: object) -> bool:
        return b in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def touch(self, blocks: Sequence[int], tenant: int = 0) -> None:
        for b in reversed(blocks):
            self.clock += 1
            if b in self.blocks:
                self.blocks[b][0] += 1
                self.blocks[b][1] = self.clock
            else:
                self.blocks[b] = [0, self.clock]

    def evict(self) -> list[int]:
        """Evict while over capacity; the victims, in the order they left."""
        victims = []
        while len(self.blocks) > self.capacity:
            victim = min(self.blocks, key=lambda b: tuple(self.blocks[b]))
            del self.blocks[victim]
            victims.append(victim)
        return victims


class PinnedLRU:
    """LRU whose ``pinned`` blocks never leave once cached (they count against the capacity),
    one request at a time (the fleet oracle's per replica)."""

    def __init__(self, capacity: int, pinned: frozenset[int]) -> None:
        self.capacity = capacity
        self.pinned = pinned
        self.order: OrderedDict[int, None] = OrderedDict()  # the unpinned, the victim first
        self.kept: set[int] = set()  # the pinned ones cached

    def __contains__(self, b: object) -> bool:
        return b in self.order or b in self.kept

    def __len__(self) -> int:
        return len(self.order) + len(self.kept)

    def touch(self, blocks: Sequence[int], tenant: int = 0) -> None:
        for b in reversed(blocks):
            if b in self.pinned:
                self.kept.add(b)
            else:
                self.order.pop(b, None)
                self.order[b] = None

    def evict(self) -> list[int]:
        """Evict while over capacity; the victims, in the order they left."""
        victims = []
        while len(self) > self.capacity and self.order:
            victims.append(self.order.popitem(last=False)[0])
        return victims


def _s3fifo(
    requests: Sequence[Sequence[int]], capacity: int, tenants: Sequence[int]
) -> ReferenceResult:
    cache = S3FIFOCache(capacity, _parents(requests))
    result = ReferenceResult([])
    for r, blocks in enumerate(requests):
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        result.hit_blocks.append(k)
        result.cross += [i < k and cache.owner[b] != tenants[r] for i, b in enumerate(blocks)]
        cache.touch(blocks, tenants[r])
        cache.evict()
        if result.filled_at == -1 and len(cache) >= capacity:
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

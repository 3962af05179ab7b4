"""One engine's KV block pool, replayed from the request log: what ``validate --events`` holds
against the engine's own KV cache events.

A pool model is one plain function behind :data:`POOL_MODELS` --
``model(requests, capacity_blocks, service) -> PoolRun`` -- that replays the requests through
a pool of ``capacity_blocks`` blocks and returns the blocks it stored and the victims it
evicted, in order, as the engine's events would. The fleet simulator's per-replica engines can
take this place by registering a function of the same shape.

``vllm`` follows vLLM v1's block pool (``vllm/v1/core/block_pool.py``, ``kv_cache_utils.py``'s
``FreeKVCacheBlockQueue``), in these rules:

- a request is admitted first come, first served, when the free queue holds the blocks it
  needs (every prompt and output block, less the cached prefix it hits); the head of the queue
  waits for blocks, and those behind it wait too;
- its cache hit is the longest prefix of its full prompt blocks that is cached; those blocks
  leave the free queue (a running request's blocks are pinned: never evicted);
- each new block is popped from the head of the free queue; a popped block that still holds a
  hash is evicted then (``BlockRemoved``), and each of the request's full prompt blocks that is
  not cached yet gets its hash (``BlockStored``);
- when the request finishes its blocks return to the tail of the free queue, its last block
  first: the free queue is least recently freed first and, among one request's blocks, tail
  first -- so a prompt's suffix is evicted before its prefix.

Where it is simpler than vLLM: prefill is instant at admission (blocks are stored when the
request starts), output blocks are allocated at admission and never cached (vLLM caches the
full ones; their tokens are not in the log, so their ids could not link anyway), there is no
preemption, and a block cached at a non-prefix position is not cached twice. A request's
service time comes from :class:`ServiceModel` (the log has no finish times).

``lru`` is the fallback: one LRU list of blocks, every prompt block touched at arrival, no
pinning.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PoolRequests:
    """Requests in arrival order: epoch-second arrivals, token counts, and each one's full
    prompt blocks as prefixscope ids (CSR: request ``i`` holds
    ``block_ids[offsets[i]:offsets[i+1]]``)."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    offsets: np.ndarray
    block_ids: np.ndarray
    block_size: int

    @property
    def n(self) -> int:
        return len(self.arrival_s)

    def subset(self, keep: np.ndarray) -> PoolRequests:
        """The requests where ``keep`` holds, in the same order."""
        idx = np.flatnonzero(keep)
        lengths = np.diff(self.offsets)[idx]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        parts = [self.block_ids[self.offsets[i] : self.offsets[i + 1]] for i in idx]
        ids = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        return PoolRequests(
            self.arrival_s[idx],
            self.input_tokens[idx],
            self.output_tokens[idx],
            offsets,
            ids.astype(np.uint64),
            self.block_size,
        )


@dataclass(frozen=True)
class ServiceModel:
    """How long a request holds its blocks: its uncached prompt tokens at
    ``prefill_tokens_per_s`` plus its output tokens at ``tpot_s`` each, times ``scale[i]``
    when given (a per-request factor: the worked check's "true" engine varies it)."""

    tpot_s: float = 0.02
    prefill_tokens_per_s: float = 10_000.0
    scale: np.ndarray | None = None

    def seconds(self, i: int, uncached_tokens: int, output_tokens: int) -> float:
        base = uncached_tokens / self.prefill_tokens_per_s + output_tokens * self.tpot_s
        return base * (1.0 if self.scale is None else float(self.scale[i]))


STORED, EVICTED = 0, 1


@dataclass
class PoolRun:
    """What a pool did, in its order: ``ops`` holds (time, STORED or EVICTED, block id,
    request, block index; -1 for an eviction's request and index); ``waited`` counts requests
    that had to wait for blocks, ``too_large`` those larger than the whole pool (never
    admitted)."""

    ops: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    waited: int = 0
    too_large: int = 0

    def store(self, t: float, block: int, request: int, index: int) -> None:
        self.ops.append((t, STORED, block, request, index))

    def evict(self, t: float, block: int) -> None:
        self.ops.append((t, EVICTED, block, -1, -1))


PoolModel = Callable[[PoolRequests, int, ServiceModel], PoolRun]


def vllm_pool(requests: PoolRequests, capacity: int, service: ServiceModel) -> PoolRun:
    """vLLM v1's block pool of ``capacity`` blocks (the module's rules)."""
    run = PoolRun()
    free: OrderedDict[int, None] = OrderedDict((s, None) for s in range(capacity))
    held_by: list[int | None] = [None] * capacity  # slot -> the block id it caches
    refs = [0] * capacity
    cached: dict[int, int] = {}  # block id -> slot
    slots_of: dict[int, list[int]] = {}
    finishes: list[tuple[float, int]] = []
    waiting: deque[int] = deque()
    bs = requests.block_size

    def admit(i: int, t: float) -> bool:
        ids = requests.block_ids[requests.offsets[i] : requests.offsets[i + 1]].tolist()
        out = int(requests.output_tokens[i])
        total = max(-(-(int(requests.input_tokens[i]) + out) // bs), len(ids))
        if total > capacity:
            run.too_large += 1
            return True
        hits = 0
        while hits < len(ids) and ids[hits] in cached:
            hits += 1
        hit_slots = [cached[b] for b in ids[:hits]]
        need = total - hits
        if len(free) - sum(1 for s in hit_slots if s in free) < need:
            return False
        for s in hit_slots:
            refs[s] += 1
            free.pop(s, None)
        new = []
        for _ in range(need):
            s, _none = free.popitem(last=False)
            victim = held_by[s]
            if victim is not None:
                del cached[victim]
                held_by[s] = None
                run.evict(t, victim)
            refs[s] = 1
            new.append(s)
        for k in range(hits, len(ids)):
            b, s = ids[k], new[k - hits]
            if b not in cached:
                cached[b] = s
                held_by[s] = b
                run.store(t, b, i, k)
        slots_of[i] = hit_slots + new
        uncached = int(requests.input_tokens[i]) - hits * bs
        heapq.heappush(finishes, (t + service.seconds(i, uncached, out), i))
        return True

    def release(i: int) -> None:
        for s in reversed(slots_of.pop(i)):  # the tail block first
            refs[s] -= 1
            if refs[s] == 0:
                free[s] = None

    def admit_waiting(t: float) -> None:
        while waiting and admit(waiting[0], t):
            waiting.popleft()

    for i in range(requests.n):
        t = float(requests.arrival_s[i])
        while finishes and finishes[0][0] <= t:
            ft, j = heapq.heappop(finishes)
            release(j)
            admit_waiting(ft)
        waiting.append(i)
        admit_waiting(t)
        if waiting and waiting[-1] == i:
            run.waited += 1
    while finishes:
        ft, j = heapq.heappop(finishes)
        release(j)
        admit_waiting(ft)
    return run


def lru_pool(requests: PoolRequests, capacity: int, service: ServiceModel) -> PoolRun:
    """An LRU list of ``capacity`` blocks: every prompt block touched at arrival."""
    run = PoolRun()
    lru: OrderedDict[int, None] = OrderedDict()
    for i in range(requests.n):
        t = float(requests.arrival_s[i])
        ids = requests.block_ids[requests.offsets[i] : requests.offsets[i + 1]].tolist()
        for k, b in enumerate(ids):
            if b in lru:
                lru.move_to_end(b)
                continue
            if len(lru) >= capacity:
                victim, _none = lru.popitem(last=False)
                run.evict(t, victim)
            lru[b] = None
            run.store(t, b, i, k)
    return run


POOL_MODELS: dict[str, PoolModel] = {"vllm": vllm_pool, "lru": lru_pool}

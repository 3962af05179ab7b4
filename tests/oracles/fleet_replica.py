"""A replica's KV pool in plain Python (``reference_pool.py``'s oracle): the ``vllm`` free
queue and second copies, the ``sglang`` radix cache and its nodes: ``nstart`` the cached
blocks that begin their radix node, ``cont`` the next block of a block's node. SGLang evicts
a leaf node whole (``_pool.py``, "Radix nodes")."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from tests.oracles.fleet import _Decoding


@dataclass
class _PoolReplica:
    capacity: int
    sglang: bool
    cache: dict[int, int] = field(default_factory=dict)  # hash -> running holders
    # vllm: hash -> running holders of its second copy (0 or 1: only its decode holds it),
    # and that holder (request, answer position)
    dups: dict[int, int] = field(default_factory=dict)
    dup_holder: dict[int, tuple[int, int]] = field(default_factory=dict)
    dup_held: dict[int, set[int]] = field(default_factory=dict)  # request -> positions
    free_queue: OrderedDict[tuple[str, int], None] = field(default_factory=OrderedDict)
    anon_free: int = 0  # sglang's hashless free blocks
    nstart: set[int] = field(default_factory=set)
    cont: dict[int, int] = field(default_factory=dict)
    stamp: dict[int, int] = field(default_factory=dict)
    releases: int = 0
    anon_ids: int = 0
    tree: OrderedDict[int, None] = field(default_factory=OrderedDict)
    dram: OrderedDict[int, None] = field(default_factory=OrderedDict)  # LRU first (vllm)
    # sglang: of ``dram`` (host memory), the blocks the GPU evicted, first evicted first
    host_lru: OrderedDict[int, None] = field(default_factory=OrderedDict)
    queue: deque[int] = field(default_factory=deque)
    decoding: dict[int, _Decoding] = field(default_factory=dict)
    running: list[int] = field(default_factory=list)  # schedule order
    # request -> its blocks past its prompt's: the answer id it holds each under, or None
    held: dict[int, list[int | None]] = field(default_factory=dict)
    pheld: dict[int, int] = field(default_factory=dict)  # request -> prompt positions it holds
    reached: dict[int, int] = field(default_factory=dict)  # request -> answer positions reached
    now: float = 0.0
    busy: float = 0.0
    steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    filled_at: int = -1
    preemptions: int = 0
    running_s: float = 0.0
    cached_s: float = 0.0
    hist: dict[int, float] = field(default_factory=dict)

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.decoding)

    def free(self) -> int:
        if self.sglang:
            return self.anon_free + sum(1 for n in self.cache.values() if n == 0)
        return len(self.free_queue)

    def cached_free(self) -> int:
        return sum(1 for n in [*self.cache.values(), *self.dups.values()] if n == 0)

    def take(self, r: int, parent: np.ndarray) -> None:
        """One free block for request ``r``."""
        if self.sglang:
            if self.anon_free:
                self.anon_free -= 1
                return
            children = {int(parent[b]) for b in self.cache}
            leaves = [b for b, n in self.cache.items() if n == 0 and b not in children]
            b = min(leaves, key=lambda b: (self.stamp[b], b))
            self._evict(b, r)
            # the rest of its radix node: free, hashless
            while b not in self.nstart and self.cache.get(int(parent[b])) == 0:
                b = int(parent[b])
                self.cont.pop(b, None)
                self._evict(b, r)
                self.anon_free += 1
            if self.cont.get(int(parent[b])) == b:
                del self.cont[int(parent[b])]
            return
        (kind, b), _ = self.free_queue.popitem(last=False)
        if kind == "dup":
            del self.dups[b]
        elif kind == "hash" and b in self.dups:
            self._promote(b)
        elif kind == "hash":
            del self.cache[b]
        if kind != "anon" and self.filled_at == -1:
            self.filled_at = r

    def _promote(self, b: int) -> None:
        """The first copy of ``b`` is evicted; its second copy becomes the one lookups find,
        where it is in the queue, held by whoever holds it."""
        self.cache[b] = self.dups.pop(b)
        if self.cache[b] == 0:
            self.free_queue = OrderedDict(
                (("hash", b) if key == ("dup", b) else key, None) for key in self.free_queue
            )
        else:
            q, j = self.dup_holder.pop(b)
            self.dup_held[q].discard(j)

    def split(self, u: int) -> None:
        """sglang: a lookup or an insert ends at ``u``: its node is split just after it."""
        if u in self.cont:
            self.nstart.add(self.cont.pop(u))

    def joins(self, b: int, prev: int | None) -> None:
        """sglang: ``b``, just cached, continues ``prev``'s node (``None``: begins one)."""
        self.cont.pop(b, None)
        if prev is None:
            self.nstart.add(b)
        else:
            self.nstart.discard(b)
            self.cont[prev] = b

    def _evict(self, b: int, r: int) -> None:
        del self.cache[b]
        if b in self.dram:  # sglang: host memory keeps it, and may now evict it
            self.host_lru[b] = None
        if self.filled_at == -1:
            self.filled_at = r

    def lock(self, b: int) -> None:
        if self.cache[b] == 0 and not self.sglang:
            del self.free_queue[("hash", b)]
        self.cache[b] += 1

    def release(
        self,
        blocks: list[int],
        tail: list[int | None],
        full: int = 0,
        answer: list[int] | None = None,
        parent: np.ndarray | None = None,
        reached: int = 0,
        dup_held: set[int] | None = None,
    ) -> None:
        """A request's blocks past its prompt's (``tail``: the answer id it holds each under,
        None for a hashless one), the first ``full`` of them cached: where it holds an id,
        under that id; past the ``reached`` answer positions, where ``answer`` (given once it
        is done) names one this replica neither holds nor lacks the parent of, under that;
        else never hit. vllm puts the cached ones at the
        queue's tail deepest first, the others at its head. Then ``blocks``, deepest first."""
        self.releases += 1
        dup_held = dup_held or set()
        new: dict[int, int] = {}
        for j in range(reached, min(full, len(answer or []))):
            b = answer[j]
            if b not in self.cache and (parent[b] < 0 or int(parent[b]) in self.cache):
                self.cache[b] = 0
                self.host_lru.pop(b, None)
                new[j] = b
                if self.sglang:
                    self.joins(b, answer[j - 1] if new.get(j - 1) == parent[b] else None)
        for j in range(len(tail) - 1, -1, -1):
            b = tail[j] if tail[j] is not None else new.get(j)
            if b is not None and j in dup_held:
                self.dups[b] -= 1
                del self.dup_holder[b]
                self.free_queue[("dup", b)] = None
                continue
            if b is not None:
                if tail[j] is not None:
                    self.cache[b] -= 1
                if self.cache[b] == 0:
                    self.stamp[b] = self.releases
                    if not self.sglang:
                        self.free_queue[("hash", b)] = None
                continue
            if self.sglang:
                self.anon_free += 1
                continue
            self.anon_ids += 1
            self.free_queue[("anon", self.anon_ids)] = None
            if j >= full:
                self.free_queue.move_to_end(("anon", self.anon_ids), last=False)
        for b in reversed(list(dict.fromkeys(blocks))):
            self.cache[b] -= 1
            if self.cache[b] == 0:
                self.stamp[b] = self.releases
                if not self.sglang:
                    self.free_queue[("hash", b)] = None

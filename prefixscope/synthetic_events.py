"""A request log and the KV cache events that an engine's block pool of known size emits for it:
the truth ``validate --events`` is checked against (``benchmarks/validate_events.py``, tests).

The workload: sessions open with one of a few shared system prompts, and turn k+1 re-sends turn
k's prompt with a new user message (its answer is not re-sent, so every prompt block the
engine caches is a block of the log). Arrivals are Poisson.

The engine is written here on its own, as vLLM v1's ``BlockPool`` runs (not with
:mod:`prefixscope.analysis.validate.pool`, which it checks): blocks in a doubly linked free
queue, a hash map of cached blocks, reference counts. A request is admitted first come, first
served when the free queue holds the blocks it needs; its hit is the longest cached prefix,
whose blocks leave the queue (pinned while it runs); each new block comes from the queue's
head, evicting the hash it held (``BlockRemoved``); its new full prompt blocks are stored as
one chain (``BlockStored`` with the parent's hash and the tokens); at its end its blocks go
back to the queue's tail, last block first. A request's true service time is the nominal
model's times a per-request factor (lognormal): the simulator, which knows only the nominal
model, pins blocks a little longer or shorter than the engine did.

Engine hashes are SHA-256 digests of (parent digest, tokens), sent as bytes (map encoding) or
as their first 8 bytes as an int (array encoding), as vLLM sends either.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prefixscope.ingest.kvevents import structs
from prefixscope.ingest.kvevents.framing import MAGIC, encode_frame


@dataclass(frozen=True)
class Workload:
    requests: int = 1_500
    block_size: int = 16
    system_prompts: int = 6
    system_blocks: tuple[int, int] = (4, 16)  # full blocks of a system prompt, low..high
    message_tokens: tuple[int, int] = (40, 400)
    output_tokens: tuple[int, int] = (20, 300)
    turns: tuple[int, int] = (1, 8)
    rate_per_s: float = 4.0
    seed: int = 0
    start_s: float = 1_780_000_000.0


@dataclass(frozen=True)
class Engine:
    capacity_blocks: int = 2_000
    tpot_s: float = 0.02
    prefill_tokens_per_s: float = 10_000.0
    jitter_sigma: float = 0.3  # lognormal sigma of the per-request service factor
    encoding: str = "map"


@dataclass(frozen=True)
class LogRequest:
    arrival_s: float
    tokens: tuple[int, ...]
    output_tokens: int


def make_log(w: Workload) -> list[LogRequest]:
    """The requests in arrival order."""
    rng = np.random.default_rng(w.seed)
    vocab = 150_000
    systems = [
        rng.integers(0, vocab, int(rng.integers(*w.system_blocks)) * w.block_size).tolist()
        for _ in range(w.system_prompts)
    ]
    arrivals = w.start_s + np.cumsum(rng.exponential(1 / w.rate_per_s, w.requests))
    out: list[LogRequest] = []
    open_sessions: list[tuple[list[int], int]] = []  # (prompt so far, turns left)
    for t in arrivals.tolist():
        if open_sessions and rng.random() < 0.7:
            k = int(rng.integers(len(open_sessions)))
            prompt, left = open_sessions[k]
        else:
            prompt, left = (
                list(systems[int(rng.integers(len(systems)))]),
                int(rng.integers(*w.turns)),
            )
            open_sessions.append((prompt, left))
            k = len(open_sessions) - 1
        prompt = prompt + rng.integers(0, vocab, int(rng.integers(*w.message_tokens))).tolist()
        out.append(LogRequest(t, tuple(prompt), int(rng.integers(*w.output_tokens))))
        if left <= 1:
            open_sessions.pop(k)
        else:
            open_sessions[k] = (prompt, left - 1)
    return out


@dataclass
class _Block:
    index: int
    ref: int = 0
    hash: bytes | None = None
    prev: _Block | None = None
    next: _Block | None = None


class _FreeQueue:
    """vLLM's free block queue: a doubly linked list; eviction takes the head."""

    def __init__(self, blocks: list[_Block]) -> None:
        self.head = _Block(-1)
        self.tail = _Block(-2)
        self.head.next, self.tail.prev = self.tail, self.head
        self.size = 0
        for b in blocks:
            self.append(b)

    def append(self, b: _Block) -> None:
        last = self.tail.prev
        assert last is not None
        last.next, b.prev, b.next, self.tail.prev = b, last, self.tail, b
        self.size += 1

    def remove(self, b: _Block) -> None:
        assert b.prev is not None and b.next is not None
        b.prev.next, b.next.prev = b.next, b.prev
        b.prev = b.next = None
        self.size -= 1

    def popleft(self) -> _Block:
        b = self.head.next
        assert b is not None and b is not self.tail
        self.remove(b)
        return b


@dataclass
class EngineRun:
    batches: list[tuple[float, list[object]]] = field(default_factory=list)
    evictions: int = 0
    stored_blocks: int = 0
    waited: int = 0


def run_engine(log: list[LogRequest], e: Engine, block_size: int, seed: int = 1) -> EngineRun:
    """The events of a pool of ``e.capacity_blocks`` serving ``log`` (one batch per admission)."""
    rng = np.random.default_rng(seed)
    factor = rng.lognormal(0.0, e.jitter_sigma, len(log))
    blocks = [_Block(i) for i in range(e.capacity_blocks)]
    free = _FreeQueue(blocks)
    cached: dict[bytes, _Block] = {}
    running: dict[int, list[_Block]] = {}
    finishes: list[tuple[float, int]] = []
    waiting: deque[int] = deque()
    run = EngineRun()
    enc = e.encoding

    def chain(tokens: tuple[int, ...]) -> list[bytes]:
        hashes, parent = [], b""
        for k in range(len(tokens) // block_size):
            blob = np.asarray(tokens[k * block_size : (k + 1) * block_size], "<u4").tobytes()
            parent = hashlib.sha256(parent + blob).digest()
            hashes.append(parent)
        return hashes

    def wire(h: bytes) -> bytes | int:
        return h if enc == "map" else int.from_bytes(h[:8], "big")

    def try_admit(i: int, t: float) -> bool:
        req = log[i]
        hashes = chain(req.tokens)
        total = max(-(-(len(req.tokens) + req.output_tokens) // block_size), len(hashes))
        hits = 0
        while hits < len(hashes) and hashes[hits] in cached:
            hits += 1
        hit_blocks = [cached[h] for h in hashes[:hits]]
        in_queue = sum(1 for b in hit_blocks if b.ref == 0)
        if free.size - in_queue < total - hits:
            return False
        events: list[object] = []
        for b in hit_blocks:
            if b.ref == 0:
                free.remove(b)
            b.ref += 1
        new = []
        for _ in range(total - hits):
            b = free.popleft()
            if b.hash is not None:
                del cached[b.hash]
                events.append(structs.removed(enc, [wire(b.hash)]))
                run.evictions += 1
                b.hash = None
            b.ref = 1
            new.append(b)
        stored = []
        for k in range(hits, len(hashes)):
            if hashes[k] in cached:
                continue
            cached[hashes[k]] = new[k - hits]
            new[k - hits].hash = hashes[k]
            stored.append(k)
        for run_ in _contiguous(stored):  # one event per chain of consecutive blocks
            first, last = run_[0], run_[-1]
            parent = wire(hashes[first - 1]) if first else None
            tokens = list(req.tokens[first * block_size : (last + 1) * block_size])
            ids = [wire(hashes[k]) for k in run_]
            events.append(structs.stored(enc, ids, parent, tokens, block_size))
            run.stored_blocks += len(run_)
        running[i] = hit_blocks + new
        uncached = len(req.tokens) - hits * block_size
        service = uncached / e.prefill_tokens_per_s + req.output_tokens * e.tpot_s
        heapq.heappush(finishes, (t + service * float(factor[i]), i))
        if events:
            run.batches.append((t, events))
        return True

    def finish(i: int) -> None:
        for b in reversed(running.pop(i)):
            b.ref -= 1
            if b.ref == 0:
                free.append(b)

    def drain(t: float) -> None:
        while waiting and try_admit(waiting[0], t):
            waiting.popleft()

    for i, req in enumerate(log):
        while finishes and finishes[0][0] <= req.arrival_s:
            ft, j = heapq.heappop(finishes)
            finish(j)
            drain(ft)
        waiting.append(i)
        drain(req.arrival_s)
        if waiting and waiting[-1] == i:
            run.waited += 1
    while finishes:
        ft, j = heapq.heappop(finishes)
        finish(j)
        drain(ft)
    return run


def _contiguous(ks: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for k in ks:
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return runs


def write_log(log: list[LogRequest], path: Path) -> None:
    """The log as a token table (``ingest --format tokens --output-tokens-field
    output_tokens``)."""
    with path.open("w") as f:
        for r in log:
            line = {
                "timestamp": r.arrival_s,
                "token_ids": r.tokens,
                "output_tokens": r.output_tokens,
            }
            f.write(json.dumps(line) + "\n")


def write_capture(runs: list[EngineRun], path: Path, encoding: str) -> None:
    """The engines' batches as ``capture-events`` writes them from one endpoint per rank (rank
    ``r`` is ``runs[r]``, its seq from 0), in time order."""
    merged = sorted(
        (t, r, seq, events)
        for r, run in enumerate(runs)
        for seq, (t, events) in enumerate(run.batches)
    )
    with path.open("wb") as f:
        f.write(MAGIC)
        for t, r, seq, events in merged:
            payload = structs.encode_batch(encoding, t, events, r)
            f.write(encode_frame(t + 0.001, seq, r, b"", payload))


def split_by_session(log: list[LogRequest], ranks: int, block_size: int) -> list[list[LogRequest]]:
    """The log routed to ``ranks`` engines by its first block (a session sticks to one)."""
    out: list[list[LogRequest]] = [[] for _ in range(ranks)]
    for r in log:
        key = hash(tuple(r.tokens[: 2 * block_size])) if r.tokens else 0
        out[key % ranks].append(r)
    return out

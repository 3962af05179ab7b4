"""The decode side of a disaggregated fleet: replicas that hold running requests' KV and
decode, fed by prefill replicas (docs/fleet.md, "Disaggregated prefill and decode").

A request whose prompt a prefill replica has computed (its first token with it) is *ready*.
It waits in one queue, first come first served, until a decode replica has room for its KV:

- **room** is counted in blocks: a request reserves ``ceil((input + output) / block)`` of
  the replica's pool when it is admitted (its prompt's KV and every token it will generate),
  and at most ``max_seqs`` requests hold a replica at once. The queue's head is admitted by
  the replica with the most free blocks that can hold it; no later request overtakes it
  (a decode pool that is full makes requests wait);
- its KV then moves from the prefill replica at the link's speed (``transfer_s``, computed
  by the caller) and *lands*; its first token reaches the user with it (TTFT ends there);
- it joins the replica's running batch at the next step boundary (at once when the replica
  is idle) and decodes ``output − 1`` tokens, one per step; it leaves, and frees its blocks,
  at the end of the step that makes its last token;
- a step of ``d`` decodes whose contexts sum to ``S`` takes ``a + b·max(d, k₁) + f·d +
  (c + e·max(1, k₂))·S`` seconds: the fleet's step form (``stepcost.py``) with no prefill
  chunk, the same terms a colocated replica's step gives its decodes (``_sched.step``).

A request of more blocks than a replica holds is never admitted: ``replica`` −1, and the
caller reports it. Everything is deterministic: at one instant the requests that became
ready come first, then every landing (an idle replica starts its step once all have landed),
then the steps that end (their finished requests' room goes to the queue at once); then the
lower request or replica.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.fleet.stepcost import StepCost

_READY, _LAND, _KICK, _STEP = 0, 1, 2, 3


@dataclass(frozen=True)
class DecodePool:
    """``replicas`` decode replicas of ``capacity_blocks`` blocks of ``block_size`` tokens
    each, stepping at ``cost`` (one GPU of the decode deployment), ``max_seqs`` at most."""

    replicas: int
    capacity_blocks: int
    block_size: int
    cost: StepCost
    max_seqs: int

    def check(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"a decode pool needs a replica, got {self.replicas}")
        if self.capacity_blocks < 1 or self.block_size < 1 or self.max_seqs < 1:
            raise ValueError("a decode replica holds at least one block and one request")


@dataclass(frozen=True, eq=False)
class Decoded:
    """Per request: its decode replica (−1: larger than a replica's pool, never admitted),
    when it was admitted, when its KV landed (its first token out) and when it finished
    (NaN where never admitted), seconds on the fleet's clock. Per replica: busy seconds,
    steps and decode tokens."""

    replica: np.ndarray
    admitted_at: np.ndarray
    landed_at: np.ndarray
    done_at: np.ndarray
    busy: np.ndarray
    steps: np.ndarray
    decode_tokens: np.ndarray

    @property
    def refused(self) -> np.ndarray:
        return self.replica < 0


def blocks_needed(input_tokens: np.ndarray, output_tokens: np.ndarray, block_size: int):
    """Blocks a request reserves on a decode replica: its prompt and every output token."""
    tokens = np.asarray(input_tokens, np.int64) + np.maximum(np.asarray(output_tokens), 1)
    return -(-tokens // int(block_size))


def decode(
    ready: np.ndarray,
    transfer_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    pool: DecodePool,
) -> Decoded:
    """The decode pool over requests ready at ``ready`` (s), each moving its KV in
    ``transfer_s`` (s): the module docstring's rules."""
    pool.check()
    ready = np.asarray(ready, np.float64)
    n, r = len(ready), pool.replicas
    inputs = np.asarray(input_tokens, np.int64)
    steps_left = np.maximum(np.asarray(output_tokens, np.int64), 1) - 1
    need = blocks_needed(inputs, output_tokens, pool.block_size)
    c = pool.cost
    per_ctx = c.c + c.e * max(1.0, c.k2)

    replica = np.full(n, -1, np.int64)
    admitted = np.full(n, np.nan)
    landed = np.full(n, np.nan)
    done = np.full(n, np.nan)
    busy = np.zeros(r)
    steps = np.zeros(r, np.int64)
    tokens = np.zeros(r, np.int64)

    free = [pool.capacity_blocks] * r
    seqs = [0] * r
    d = [0] * r  # running decodes
    ctx = [0] * r  # their contexts, summed
    active = [False] * r  # a step in flight
    joining: list[list[int]] = [[] for _ in range(r)]  # landed during a step: join after it
    finish: list[list[tuple[int, int]]] = [[] for _ in range(r)]  # (last step, request)
    queue: deque[int] = deque()
    events: list[tuple[float, int, int, int]] = []
    for i in np.lexsort((np.arange(n), ready)):
        heapq.heappush(events, (float(ready[i]), _READY, int(i), 0))

    def admit(t: float) -> None:
        while queue:
            i = queue[0]
            best = -1
            for j in range(r):
                if (
                    seqs[j] < pool.max_seqs
                    and free[j] >= need[i]
                    and (best < 0 or free[j] > free[best])
                ):
                    best = j
            if best < 0:
                return
            queue.popleft()
            free[best] -= int(need[i])
            seqs[best] += 1
            replica[i] = best
            admitted[i] = t
            heapq.heappush(events, (t + float(transfer_s[i]), _LAND, i, best))

    def leave(i: int, j: int, t: float) -> None:
        done[i] = t
        free[j] += int(need[i])
        seqs[j] -= 1

    def join(i: int, j: int) -> None:
        d[j] += 1
        ctx[j] += int(inputs[i])
        heapq.heappush(finish[j], (int(steps[j] + steps_left[i]), i))

    def start_step(j: int, t: float) -> None:
        if not d[j]:
            active[j] = False
            return
        seconds = c.a + c.b * max(d[j], c.k1) + c.f * d[j] + per_ctx * ctx[j]
        busy[j] += seconds
        active[j] = True
        heapq.heappush(events, (t + seconds, _STEP, j, 0))

    while events:
        t, kind, a, b = heapq.heappop(events)
        if kind == _READY:
            if need[a] > pool.capacity_blocks:
                continue  # never fits: refused, reported by the caller
            queue.append(a)
            admit(t)
        elif kind == _LAND:
            landed[a] = t
            if steps_left[a] == 0:  # its one token came from the prefill replica
                leave(a, b, t)
                admit(t)
            else:  # it joins at the next step boundary: now, if the replica is idle, once
                joining[b].append(a)  # every request landing at this instant has landed
                if not active[b]:
                    heapq.heappush(events, (t, _KICK, b, 0))
        elif kind == _KICK:
            if not active[a] and joining[a]:
                for i in joining[a]:
                    join(i, a)
                joining[a].clear()
                start_step(a, t)
        else:  # a step of replica a ended
            j = a
            steps[j] += 1
            tokens[j] += d[j]
            ctx[j] += d[j]
            freed = False
            while finish[j] and finish[j][0][0] <= steps[j]:
                _, i = heapq.heappop(finish[j])
                d[j] -= 1
                ctx[j] -= int(inputs[i] + steps_left[i])
                leave(i, j, t)
                freed = True
            for i in joining[j]:
                join(i, j)
            joining[j].clear()
            if freed:
                admit(t)
            start_step(j, t)
    return Decoded(replica, admitted, landed, done, busy, steps, tokens)

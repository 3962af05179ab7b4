"""The decode pool in plain Python: the test oracle for the compiled loop of
``fleet/decode_pool.py`` (its docstring states the rules). Written for obviousness, not speed:
one heap of events, Python lists for the queue and each replica's batch."""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from prefixscope.analysis.fleet.decode_pool import Decoded, DecodePool, blocks_needed

_READY, _LAND, _KICK, _STEP = 0, 1, 2, 3


def reference_decode(
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

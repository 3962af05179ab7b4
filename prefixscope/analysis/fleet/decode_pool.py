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

from dataclasses import dataclass

import numba
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
    ``transfer_s`` (s): the module docstring's rules, in a compiled loop (:func:`_run`)."""
    pool.check()
    ready = np.ascontiguousarray(ready, np.float64)
    n, r = len(ready), pool.replicas
    outputs = np.asarray(output_tokens, np.int64)
    c = pool.cost
    out = _run(
        np.lexsort((np.arange(n), ready)).astype(np.int64),
        ready,
        np.ascontiguousarray(transfer_s, np.float64),
        np.ascontiguousarray(input_tokens, np.int64),
        np.maximum(outputs, 1) - 1,
        blocks_needed(input_tokens, outputs, pool.block_size).astype(np.int64),
        np.int64(pool.capacity_blocks),
        np.int64(pool.max_seqs),
        np.int64(r),
        np.array([c.a, c.b, c.k1, c.f, c.c + c.e * max(1.0, c.k2)], np.float64),
    )
    return Decoded(*out)


# -- the compiled loop: an event heap of (time, kind, a, b) and each replica's heap of
# -- (last step, request); ready requests come in their sorted order, not through the heap


@numba.njit(cache=True)
def _before(t, k, a, b, u, m, x, y):  # type: ignore[no-untyped-def]
    """Whether event (t, k, a, b) comes before (u, m, x, y): by time, kind, then ids."""
    if t != u:
        return t < u
    if k != m:
        return k < m
    if a != x:
        return a < x
    return b < y


@numba.njit(cache=True)
def _ev_push(et, ek, ea, eb, size, t, k, a, b):  # type: ignore[no-untyped-def]
    j = size
    while j > 0:
        p = (j - 1) // 2
        if not _before(t, k, a, b, et[p], ek[p], ea[p], eb[p]):
            break
        et[j], ek[j], ea[j], eb[j] = et[p], ek[p], ea[p], eb[p]
        j = p
    et[j], ek[j], ea[j], eb[j] = t, k, a, b
    return size + 1


@numba.njit(cache=True)
def _ev_pop(et, ek, ea, eb, size):  # type: ignore[no-untyped-def]
    """Remove the first event (read it at index 0 before); the new size."""
    size -= 1
    t, k, a, b = et[size], ek[size], ea[size], eb[size]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and _before(et[c + 1], ek[c + 1], ea[c + 1], eb[c + 1],
                                    et[c], ek[c], ea[c], eb[c]):  # fmt: skip
            c += 1
        if not _before(et[c], ek[c], ea[c], eb[c], t, k, a, b):
            break
        et[j], ek[j], ea[j], eb[j] = et[c], ek[c], ea[c], eb[c]
        j = c
    if size > 0:
        et[j], ek[j], ea[j], eb[j] = t, k, a, b
    return size


@numba.njit(cache=True)
def _fin_push(fs, fr, base, size, step, req):  # type: ignore[no-untyped-def]
    j = size
    while j > 0:
        p = (j - 1) // 2
        ps, pr = fs[base + p], fr[base + p]
        if ps < step or (ps == step and pr < req):
            break
        fs[base + j], fr[base + j] = ps, pr
        j = p
    fs[base + j], fr[base + j] = step, req


@numba.njit(cache=True)
def _fin_pop(fs, fr, base, size):  # type: ignore[no-untyped-def]
    """Remove the first (read it at ``base`` before); ``size`` is the size before."""
    size -= 1
    step, req = fs[base + size], fr[base + size]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and (
            fs[base + c + 1] < fs[base + c]
            or (fs[base + c + 1] == fs[base + c] and fr[base + c + 1] < fr[base + c])
        ):
            c += 1
        cs, cr = fs[base + c], fr[base + c]
        if cs > step or (cs == step and cr > req):
            break
        fs[base + j], fr[base + j] = cs, cr
        j = c
    if size > 0:
        fs[base + j], fr[base + j] = step, req


@numba.njit(cache=True)
def _run(order, ready, move, inputs, steps_left, need, capacity, max_seqs, r, cost):  # type: ignore[no-untyped-def]
    n = len(ready)
    a0, b0, k1, f0, per_ctx = cost[0], cost[1], cost[2], cost[3], cost[4]
    replica = np.full(n, -1, np.int64)
    admitted = np.full(n, np.nan)
    landed = np.full(n, np.nan)
    done = np.full(n, np.nan)
    busy = np.zeros(r)
    steps = np.zeros(r, np.int64)
    tokens = np.zeros(r, np.int64)
    free = np.full(r, capacity, np.int64)
    seqs = np.zeros(r, np.int64)
    d = np.zeros(r, np.int64)
    ctx = np.zeros(r, np.int64)
    active = np.zeros(r, np.bool_)
    join_head = np.full(r, -1, np.int64)
    join_next = np.full(n, -1, np.int64)
    fs = np.zeros(r * max_seqs, np.int64)
    fr = np.zeros(r * max_seqs, np.int64)
    fn = np.zeros(r, np.int64)
    queue = np.zeros(n, np.int64)
    qh, qt = 0, 0
    cap = 2 * n + r + 1
    et, ek = np.zeros(cap), np.zeros(cap, np.int64)
    ea, eb = np.zeros(cap, np.int64), np.zeros(cap, np.int64)
    size, nxt = 0, 0
    while nxt < n or size > 0:
        # the next event: a ready request (kind 0: first at its instant) or the heap's first
        if nxt < n and (size == 0 or _before(ready[order[nxt]], _READY, order[nxt], 0,
                                             et[0], ek[0], ea[0], eb[0])):  # fmt: skip
            i = order[nxt]
            nxt += 1
            t = ready[i]
            if need[i] > capacity:
                continue  # never fits: refused, reported by the caller
            queue[qt] = i
            qt += 1
            kind, x, y = _READY, i, 0
        else:
            t, kind, x, y = et[0], ek[0], ea[0], eb[0]
            size = _ev_pop(et, ek, ea, eb, size)
        admit = kind == _READY
        if kind == _LAND:
            landed[x] = t
            if steps_left[x] == 0:  # its one token came from the prefill replica
                done[x] = t
                free[y] += need[x]
                seqs[y] -= 1
                admit = True
            else:  # it joins at the next step boundary: now, if the replica is idle, once
                join_next[x] = join_head[y]  # every request landing at this instant has
                join_head[y] = x  # landed
                if not active[y]:
                    size = _ev_push(et, ek, ea, eb, size, t, _KICK, y, 0)
        elif kind >= _KICK:  # a replica's kick or the end of its step
            j = x
            if kind == _KICK and (active[j] or join_head[j] < 0):
                continue
            if kind == _STEP:
                steps[j] += 1
                tokens[j] += d[j]
                ctx[j] += d[j]
                base = j * max_seqs
                while fn[j] > 0 and fs[base] <= steps[j]:
                    i = fr[base]
                    _fin_pop(fs, fr, base, fn[j])
                    fn[j] -= 1
                    d[j] -= 1
                    ctx[j] -= inputs[i] + steps_left[i]
                    done[i] = t
                    free[j] += need[i]
                    seqs[j] -= 1
                    admit = True
            i = join_head[j]
            while i >= 0:
                d[j] += 1
                ctx[j] += inputs[i]
                _fin_push(fs, fr, j * max_seqs, fn[j], steps[j] + steps_left[i], i)
                fn[j] += 1
                i = join_next[i]
            join_head[j] = -1
            if d[j] > 0:
                seconds = a0 + b0 * max(float(d[j]), k1) + f0 * d[j] + per_ctx * ctx[j]
                busy[j] += seconds
                active[j] = True
                size = _ev_push(et, ek, ea, eb, size, t + seconds, _STEP, j, 0)
            else:
                active[j] = False
        if admit:  # the queue's head, first come first served, while some replica holds it
            while qh < qt:
                i = queue[qh]
                best = -1
                for j in range(r):
                    if (
                        seqs[j] < max_seqs
                        and free[j] >= need[i]
                        and (best < 0 or free[j] > free[best])
                    ):
                        best = j
                if best < 0:
                    break
                qh += 1
                free[best] -= need[i]
                seqs[best] += 1
                replica[i] = best
                admitted[i] = t
                size = _ev_push(et, ek, ea, eb, size, t + move[i], _LAND, i, best)
    return replica, admitted, landed, done, busy, steps, tokens

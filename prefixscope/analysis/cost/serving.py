"""TTFT and TPOT of a closed-loop benchmark at fixed concurrency, from a step-time model.

A serving benchmark keeps ``c`` requests in flight, each ``isl`` prompt tokens and ``osl``
output tokens, and sends a new one as soon as one finishes. With every request the same length
the requests move in waves: ``c`` arrive together, their prefills are scheduled first come,
first served, and they decode together until they finish, nearly together, when the next wave
arrives. vLLM (v1, chunked prefill) fills each step with one token for every decoding request
and prefill chunks for the rest of its budget ``B`` (``max_num_batched_tokens``: 8,192 by
default on a server GPU). One wave is simulated step by step:

- while prefills remain, a step holds ``d`` decodes (the requests whose prompt is done, at a
  context of about ``isl``) and chunks of the waiting prompts up to ``B − d`` tokens; a
  request's first token comes with the step that finishes its prompt (its TTFT);
- then every running request decodes until it has its ``osl`` tokens, at a mean context of
  ``isl + osl/2``, the batch shrinking as requests finish; TPOT is a request's time from its
  first token to its last over ``osl − 1``.

Where the replica's KV pool holds fewer than ``c`` requests of ``isl + osl`` tokens, only that
many run at once and the rest wait for them: TTFT adds, on average, the waves waited. It
leaves out the HTTP, tokenisation and detokenisation around the engine. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: vLLM's ``max_num_batched_tokens`` for an OpenAI-compatible server on a GPU of 70 GiB or more
#: (``vllm/engine/arg_utils.py``, ``_set_default_args``).
BUDGET_TOKENS = 8192

#: ``step(decodes, mean decode context, [(new, cached), ...]) -> seconds``
StepFn = Callable[[float, float, list[tuple[float, float]]], float]


def held(concurrency: int, isl: int, osl: int, pool_tokens: float | None) -> int:
    """Requests of ``isl + osl`` tokens the KV pool lets run at once (all, with no pool)."""
    if pool_tokens is None:
        return int(concurrency)
    return max(1, min(int(concurrency), int(pool_tokens // (isl + osl))))


@dataclass(frozen=True)
class Served:
    ttft_s: float  # mean over the requests
    tpot_s: float  # mean over the requests
    running: int  # requests the KV pool let run at once
    prefill_steps: int  # steps a wave spends with prompts left


def wave(
    step: StepFn,
    concurrency: int,
    isl: int,
    osl: int,
    budget: int = BUDGET_TOKENS,
    pool_tokens: float | None = None,
) -> Served:
    """Mean TTFT and TPOT of a benchmark at ``concurrency`` (the module docstring)."""
    c = int(concurrency)
    running = held(c, isl, osl, pool_tokens)
    left = [int(isl)] * running
    decoded = [0] * running  # tokens each request has decoded while prompts remain
    first = [0.0] * running
    t, steps = 0.0, 0
    while any(left):
        decoding = [i for i in range(running) if not left[i]]
        room, chunks = budget - len(decoding), []
        for i in range(running):
            if left[i] and room > 0:
                take = min(left[i], room)
                chunks.append((float(take), float(isl - left[i])))
                left[i] -= take
                room -= take
                if not left[i]:
                    first[i] = -1.0  # finishes in this step
        t += step(float(len(decoding)), float(isl), chunks)
        steps += 1
        for i in decoding:
            decoded[i] += 1
        for i in range(running):
            if first[i] == -1.0:
                first[i] = t
    # the decode phase: request i needs osl - 1 - decoded[i] more steps; the batch shrinks
    need = np.array([max(osl - 1 - decoded[i], 0) for i in range(running)])
    order = np.sort(need)
    finish_at = {}
    done_steps, clock, alive = 0, t, running
    keys = float(isl + osl / 2.0)
    for target in np.unique(order):
        if target > done_steps:
            clock += (target - done_steps) * step(float(alive), keys, [])
            done_steps = int(target)
        finish_at[int(target)] = clock
        alive -= int((order == target).sum())
    last = np.array([finish_at[int(n)] for n in need])
    firsts = np.array(first)
    tpot = float(np.mean((last - firsts) / max(osl - 1, 1)))
    ttft = float(np.mean(firsts))
    if running < c:  # the rest wait for earlier waves: wave w waits w cycles
        cycle = float(last.max())
        waves = -(-c // running)
        sizes = [min(running, c - w * running) for w in range(waves)]
        ttft += cycle * sum(w * n for w, n in enumerate(sizes)) / c
    return Served(ttft, tpot, running, steps)


def steady_state(
    step: StepFn,
    concurrency: int,
    isl: int,
    osl: int,
    budget: int = BUDGET_TOKENS,
    pool_tokens: float | None = None,
) -> Served:
    """The other extreme of :func:`wave`: the ``c`` requests spread evenly over a request's
    life of ``N`` steps (``P`` prefill steps, ``isl / (B − d)`` and at least one, in the budget
    the other requests' decodes leave, then ``osl − 1`` decodes), so each step carries
    ``d = c·(osl − 1)/N`` decodes and ``x = c/N`` prefills; TPOT is the mean step, TTFT the
    ``P`` steps that hold the request's prompt, plus the queue where the tokens exceed the
    budget (``N`` then grows to ``c·(isl + osl − 1)/B``).
    """
    c = float(held(concurrency, isl, osl, pool_tokens))
    decodes_per_life = float(max(osl - 1, 0))
    n = 1.0 + decodes_per_life
    for _ in range(50):  # a fixed point: d depends on N, P on d
        d = c * decodes_per_life / n
        p = max(1.0, isl / max(budget - d * (c - 1) / c, 1.0))  # the others' decodes
        n_new = max(p + decodes_per_life, c * (isl + decodes_per_life) / budget)
        converged = abs(n_new - n) < 1e-9 * n_new
        n = n_new
        if converged:
            break
    d = c * decodes_per_life / n
    room = max(budget - d * (c - 1) / c, 1.0)
    p = max(1.0, isl / room)
    bound = c * (isl + decodes_per_life) / budget > p + decodes_per_life
    x, keys, chunk = c / n, isl + osl / 2.0, min(float(isl), room)

    def mixed(prefills: int) -> float:
        return step(d, keys, [(chunk, 0.0)] * prefills)

    if x < 1:
        with_one = mixed(1)
        mean = x * with_one + (1 - x) * mixed(0)
    else:
        lo = int(x)
        with_one = mixed(lo)
        mean = with_one if x == lo else (x - lo) * mixed(lo + 1) + (1 - x + lo) * with_one
    ttft = p * with_one
    if bound:
        ttft += max(n - p - decodes_per_life, 0.0) * mean
    if c < concurrency:
        cycle = n * mean
        ttft += cycle * (concurrency / c - 1) / 2
    return Served(ttft, mean, int(c), int(round(p)))

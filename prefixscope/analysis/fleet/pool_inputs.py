"""What a KV-pool engine (``vllm``, ``sglang``) needs of a trace before the fleet loop runs it:
the lookups that repeat a block of their own prompt (a pool holds such a block once), and that
every request fits a replica's pool alone."""

from __future__ import annotations

import numba
import numpy as np

from prefixscope.analysis.trace.csr import Trace


def repeats(trace: Trace) -> np.ndarray:
    """Per lookup, whether its block came earlier in the same request (a trace may name one
    block twice in a prompt; chained hashes never do). Where no id repeats at all (a trace
    with caching off, ``plan/nocache.py``), none does. One compiled pass over the lookups with
    a request stamp per id: a sort of every lookup took 2.6 s of a 7.9 s fleet run on the
    generated week's first 8 hours (benchmarks/RESULTS.md)."""
    if trace.n_unique == trace.n_lookups:
        return np.zeros(trace.n_lookups, np.bool_)
    return _repeats(trace.offsets, trace.blocks, np.full(trace.n_unique, -1, np.int64))


@numba.njit(cache=True, nogil=True)
def _repeats(offsets, blocks, last):  # type: ignore[no-untyped-def]
    """``last[b]``: the latest request that looked ``b`` up so far."""
    out = np.zeros(blocks.size, np.bool_)
    for q in range(offsets.size - 1):
        for p in range(offsets[q], offsets[q + 1]):
            b = blocks[p]
            out[p] = last[b] == q
            last[b] = q
    return out


def longest_blocks(trace: Trace, output: np.ndarray) -> int:
    """The most blocks one request of ``trace`` holds in a KV pool: its prompt and every
    generated token but the last, whose KV is never computed (0 without requests)."""
    if trace.n_requests == 0:
        return 0
    longest = trace.input_tokens + np.maximum(output, 1) - 1
    return int(np.maximum(trace.blocks_per_request, -(-longest // trace.block_size)).max())


def check_fits(trace: Trace, output: np.ndarray, capacity_blocks: int, engine: str) -> None:
    """Under a KV pool, each request alone must fit its replica's pool at its longest (its
    prompt and every generated token), as an engine checks ``max_model_len`` against its pool
    at start-up; else it could never run."""
    worst = longest_blocks(trace, output)
    if worst > capacity_blocks:
        raise ValueError(
            f"under --engine {engine} a request of {worst:,} blocks (prompt and output) "
            f"does not fit a KV pool of {capacity_blocks:,} blocks; give each replica "
            "more blocks"
        )

"""Per lookup, the smallest LRU capacity at which it hits: the largest stack depth among the
request's blocks up to it (the leading-run rule), from the one-pass curve of
``curves/stack.py`` with a bucket for every capacity from 1 to the trace's distinct blocks.

LRU is a stack algorithm, so a lookup that hits at capacity C hits at every larger one: request
``r`` hits ``#{lookups p of r : depth[p] <= C}`` blocks at capacity C, exactly what
``POLICIES['lru'].hit_blocks(trace, C)`` returns (the tests check it request by request)."""

from __future__ import annotations

import numpy as np

from prefixscope.analysis.curves import stack
from prefixscope.analysis.trace.csr import Trace

#: The depth of a lookup that misses at every capacity: its block (or one before it in the
#: request) was never seen earlier in the trace.
NEVER = np.iinfo(np.int64).max


def hit_capacities(trace: Trace) -> np.ndarray:
    """Per lookup (int64, ``n_lookups``), the smallest capacity in blocks at which it hits;
    non-decreasing along each request; :data:`NEVER` for a miss at every capacity."""
    top = max(trace.n_unique, 1)
    points = np.arange(1, top + 1, dtype=np.int64)
    one_group = np.zeros((1, trace.n_requests), np.int32)
    _, buckets = stack.stack_curve(
        trace.offsets,
        trace.blocks,
        trace.n_unique,
        points,
        trace.servable_tokens,
        trace.block_size,
        one_group,
        1,
        True,
    )
    depth = buckets.astype(np.int64) + 1  # bucket j is the capacity points[j] = j + 1
    depth[buckets == len(points)] = NEVER
    return depth

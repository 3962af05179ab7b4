"""Reuse times: how long after its previous use a block is used again, the figure a TTL or a
host-memory tier is sized from.

A *use* is a request looking a block up; a block repeated within one request is one use. The
gap of a use is the time since the previous use of the same block by any request (the view of
a shared cache); the first use of a block has none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.structure import _kernels
from prefixscope.analysis.trace.csr import Trace

#: Upper bin edges in seconds (the last bin is open): 10 s, 1 min, 10 min and 1 h are edges, so
#: the share of reuses within each is a sum of whole bins.
EDGES_S = (0.1, 1.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0)
WITHIN_S = (10.0, 60.0, 600.0, 3600.0)


@dataclass(frozen=True)
class Reuses:
    """One row per reuse: the reusing request, the gap and the tokens of the block."""

    request: np.ndarray  # int64
    gap_s: np.ndarray  # float64
    tokens: np.ndarray  # int64


def reuses(trace: Trace) -> Reuses:
    request = trace.request_of_lookup
    order = np.lexsort((request, trace.blocks))
    b, r = trace.blocks[order], request[order]
    if len(b) == 0:
        return Reuses(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64))
    first_of_use = np.r_[True, (b[1:] != b[:-1]) | (r[1:] != r[:-1])]
    use_b, use_r = b[first_of_use], r[first_of_use]
    tokens = trace.token_sizes[order][first_of_use]
    again = np.flatnonzero(use_b[1:] == use_b[:-1]) + 1
    gap = trace.times[use_r[again]] - trace.times[use_r[again - 1]]
    return Reuses(use_r[again].astype(np.int64), gap, tokens[again].astype(np.int64))


def histogram(trace: Trace, group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Reuses and their tokens per (``group`` of the reusing request, :func:`bin_of` bin),
    int64 ``(n_groups, len(EDGES_S) + 1)`` each: :func:`reuses` counted in one pass."""
    return _kernels.reuse_histogram(
        trace.offsets,
        trace.blocks,
        trace.n_unique,
        trace.times,
        trace.input_tokens,
        trace.block_size,
        np.asarray(group, np.int64),
        np.asarray(EDGES_S),
        int(n_groups),
    )


def bin_of(gap_s: np.ndarray) -> np.ndarray:
    """Bin index of each gap: bin i is (EDGES_S[i-1], EDGES_S[i]] (bin 0 starts at 0)."""
    return np.searchsorted(np.asarray(EDGES_S), gap_s, side="left")


def bins() -> list[tuple[float, float | None]]:
    lows = (0.0, *EDGES_S)
    highs: tuple[float | None, ...] = (*EDGES_S, None)
    return list(zip(lows, highs, strict=True))

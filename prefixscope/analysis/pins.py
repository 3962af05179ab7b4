"""Which blocks the ``pinned`` policy keeps: given prefixes, or the most shared ones.

A pinned prefix pins its last block and every block before it.

``--pin-top K`` measures sharing on the warm-up part of the trace, the first half by position
(so a ``last-half`` measurement never sees its own future): a *shared prefix* ends at a block
that at least two requests look up and whose children are each looked up by fewer requests (the
point where requests part ways). The K ends used by the most requests (ties: the longer prefix)
are pinned with their ancestors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prefixscope.analysis.trace import Trace


def with_ancestors(trace: Trace, ends: np.ndarray) -> np.ndarray:
    """A pin mask (bool per dense id) for the prefixes ending at ``ends``."""
    mask = np.zeros(trace.n_unique, dtype=bool)
    frontier = np.unique(ends)
    while len(frontier):
        frontier = frontier[~mask[frontier]]
        mask[frontier] = True
        frontier = trace.parent[frontier]
        frontier = frontier[frontier >= 0]
    return mask


def top_shared(trace: Trace, k: int) -> np.ndarray:
    """The pin mask of the ``k`` most shared prefixes of the trace's first half."""
    if k < 1:
        raise ValueError(f"--pin-top needs K >= 1, got {k}")
    warm = trace.request_of_lookup < trace.n_requests // 2
    uses = np.zeros(trace.n_unique, dtype=np.int64)
    # A block repeated within one request is one use of it.
    pairs = np.unique(
        trace.request_of_lookup[warm].astype(np.int64) * trace.n_unique + trace.blocks[warm]
    )
    np.add.at(uses, pairs % trace.n_unique, 1)
    child_max = np.zeros(trace.n_unique, dtype=np.int64)
    has_parent = trace.parent >= 0
    np.maximum.at(child_max, trace.parent[has_parent], uses[has_parent])
    ends = np.flatnonzero((uses >= 2) & (child_max < uses))
    depth = _depth(trace)
    order = np.lexsort((-depth[ends], -uses[ends]))
    return with_ancestors(trace, ends[order[:k]])


def from_file(trace: Trace, path: str | Path) -> np.ndarray:
    """The pin mask of the prefix hashes listed in ``path`` (one per line, decimal or 0x-hex;
    ``#`` starts a comment). Hashes the trace never looks up are ignored."""
    wanted = []
    for raw in Path(path).read_text("utf-8").splitlines():
        text = raw.split("#", 1)[0].strip()
        if text:
            try:
                wanted.append(int(text, 0))
            except ValueError:
                raise ValueError(f"{path}: not a block hash: {text[:40]!r}") from None
    known = np.isin(trace.hashes, np.array(wanted, dtype=np.uint64))
    return with_ancestors(trace, np.flatnonzero(known))


def _depth(trace: Trace) -> np.ndarray:
    depth = np.zeros(trace.n_unique, dtype=np.int64)
    position = np.arange(trace.n_lookups) - trace.offsets[trace.request_of_lookup]
    depth[trace.blocks] = position  # a chained hash always sits at the same depth
    return depth

"""Which blocks the ``pinned`` policy keeps: given prefixes, or the most shared ones.

A pinned prefix pins its last block and every block before it.

``--pin-top K`` measures sharing on the warm-up part of the trace, the first half by position
(so a ``last-half`` measurement never sees its own future): the K first shared prefixes of
:func:`prefixes.rank` (ended where sessions part ways, ranked by sessions, then length) are
pinned with their ancestors. Sessions are those of :mod:`turns`, inferred from the chains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prefixscope.analysis.structure import prefixes
from prefixscope.analysis.structure.turns import build_turns
from prefixscope.analysis.trace.csr import Trace
from prefixscope.textfile import read_text

#: The largest pin list read: 8 million hashes of 0x-hex, a line each.
PIN_FILE_BYTES = 160 * 2**20


def with_ancestors(trace: Trace, ends: np.ndarray) -> np.ndarray:
    """A pin mask (bool per dense id) for the prefixes ending at ``ends``."""
    parent = trace.parent
    mask = np.zeros(trace.n_unique, dtype=bool)
    frontier = np.unique(ends)
    while len(frontier):
        frontier = frontier[~mask[frontier]]
        mask[frontier] = True
        frontier = parent[frontier]
        frontier = frontier[frontier >= 0]
    return mask


def chain(parent: np.ndarray, end: int) -> np.ndarray:
    """The dense ids of the prefix ending at ``end``: it and its ancestors, deepest first."""
    ids = []
    while end >= 0:
        ids.append(end)
        end = int(parent[end])
    return np.array(ids, dtype=np.int64)


def top_shared(trace: Trace, k: int, session: np.ndarray | None = None) -> np.ndarray:
    """The pin mask of the ``k`` most shared prefixes of the trace's first half, ranked by
    sessions (``session`` per request; default: inferred from the block chains)."""
    if k < 1:
        raise ValueError(f"--pin-top needs K >= 1, got {k}")
    if session is None:
        session = build_turns(trace).session
    warm = np.arange(trace.n_requests) < trace.n_requests // 2
    return with_ancestors(trace, prefixes.rank(trace, session, warm).ends[:k])


def read_hashes(path: str | Path) -> np.ndarray:
    """The prefix hashes listed in ``path`` (one per line, decimal or 0x-hex, 0 to 2^64 - 1;
    ``#`` starts a comment), read once."""
    wanted = []
    text = read_text(path, PIN_FILE_BYTES, "a list of block hashes", "give --pin such a file")
    for number, raw in enumerate(text.splitlines(), 1):
        item = raw.split("#", 1)[0].strip()
        if item:
            try:
                value = int(item, 0)
            except ValueError:
                value = -1
            if not 0 <= value < 2**64:
                raise ValueError(
                    f"{path}, line {number}: not a block hash (0 to 2^64 - 1): {item[:40]!r} — "
                    "give --pin a file of block hashes"
                )
            wanted.append(value)
    return np.array(wanted, dtype=np.uint64)


def from_hashes(trace: Trace, wanted: np.ndarray) -> np.ndarray:
    """The pin mask of the prefixes ``wanted`` names; hashes the trace never looks up are
    ignored. Each of the trace's hashes is searched among the few wanted, sorted, rather than
    both sorted together (``np.isin``): the pins of a fleet's run on the ×20 trace (a file of
    200 prefixes, 5,173 blocks of its 3.66 M) took 0.27 s so, 0.55-0.80 s that way
    (benchmarks/RESULTS.md)."""
    wanted = np.unique(np.asarray(wanted, np.uint64))
    if len(wanted) == 0:
        return np.zeros(trace.n_unique, dtype=bool)
    at = np.minimum(np.searchsorted(wanted, trace.hashes), len(wanted) - 1)
    return with_ancestors(trace, np.flatnonzero(wanted[at] == trace.hashes))


def from_file(trace: Trace, path: str | Path) -> np.ndarray:
    """The pin mask of the prefix hashes listed in ``path`` (:func:`read_hashes`)."""
    return from_hashes(trace, read_hashes(path))

"""``lru``: evict the least recently used block; among blocks last used by the same request,
the deepest first.

Every request touches its whole chain, so a parent is always used at least as recently as its
child, and on a tie the child goes first: the cache stays prefix-closed (a block never outlives
its parent). The order is total, so the cache after each request is exactly the
``capacity`` most recent blocks under the key (last request, -position).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.trace import Trace


@dataclass(frozen=True)
class LRU:
    name: str = "lru"
    bounded: bool = True

    def hit_blocks(self, trace: Trace, capacity_blocks: int | None) -> np.ndarray:
        if capacity_blocks is None or capacity_blocks < 1:
            raise ValueError(f"lru needs a capacity of at least 1 block, got {capacity_blocks}")
        # Imported here: numba takes a third of a second to load, and only simulations need it.
        from prefixscope.analysis.policies._lru_kernel import lru_hit_blocks

        return lru_hit_blocks(trace.offsets, trace.blocks, trace.n_unique, int(capacity_blocks))

"""The frequency, insertion-order and offline policies (compiled loops in ``_kernels``):

- ``fifo``: evict the block inserted earliest; a hit does not refresh it, so a parent can leave
  before its child (the leading-run rule then decides what counts). A request's new blocks are
  inserted deepest first.
- ``lfu``: evict the block with the fewest uses while cached (a use: a request that touches it
  while it is cached), ties by least recent touch (deepest first within a request). A child is
  never used without its parent, so the cache stays prefix-closed.
- ``s3fifo``: S3-FIFO (Yang et al., SOSP'23): a small FIFO S (10% of the capacity), a main FIFO
  M and a ghost FIFO G of evicted ids (as many as M holds). New blocks enter S, or M when G
  remembers them; a hit raises the block's count, up to 3. Evicting from S (when S holds at
  least its share): a block with count > 1 moves to M, else it leaves and is remembered in G.
  Evicting from M: a block with count > 0 goes back to M's tail with count - 1, else it leaves.
  Kept prefix-closed: only blocks without cached children are evicted or moved; the others are
  passed over where they stand (a queue without such a block hands the eviction to the other).
- ``belady``: the offline reference: among cached blocks with no cached child, evict the one
  whose next use is furthest in the future (never used again: first), ties by least recent
  touch. It knows the future, so it bounds what an online policy could reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.policies.base import BoundedPolicy, PolicyOptions
from prefixscope.analysis.policies.lru import _kernel
from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class FIFO(BoundedPolicy):
    name: str = "fifo"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        return _kernel().fifo(
            trace.offsets, trace.blocks, trace.tenant_codes, trace.n_unique, capacity
        )


@dataclass(frozen=True)
class LFU(BoundedPolicy):
    name: str = "lfu"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        return _kernel().lfu(
            trace.offsets,
            trace.blocks,
            trace.tenant_codes,
            trace.n_unique,
            capacity,
            len(trace.tenants) > 1,
        )


@dataclass(frozen=True)
class S3FIFO(BoundedPolicy):
    name: str = "s3fifo"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        return _kernel().s3fifo(
            trace.offsets, trace.blocks, trace.tenant_codes, trace.parent, trace.n_unique, capacity
        )


@dataclass(frozen=True)
class Belady(BoundedPolicy):
    name: str = "belady"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        return _kernel().belady(
            trace.offsets,
            trace.blocks,
            trace.tenant_codes,
            trace.parent,
            trace.next_use,
            trace.n_unique,
            capacity,
            len(trace.tenants) > 1,
        )

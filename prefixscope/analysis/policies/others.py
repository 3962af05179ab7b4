"""The insertion-order and offline policies (compiled loops in ``_kernels``); ``lfu`` and
``s3fifo`` are row policies, each in its own module (``rows.py``):

- ``fifo``: evict the block inserted earliest; a hit does not refresh it, so a parent can leave
  before its child (the leading-run rule then decides what counts). A request's new blocks are
  inserted deepest first.
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

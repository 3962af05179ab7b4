"""The offline policy (its compiled loop in ``_kernels``); ``fifo``, ``lfu`` and ``s3fifo`` are
row policies, each in its own module (``rows.py``):

- ``belady``: the offline reference: among cached blocks with no cached child, evict the one
  whose next use is furthest in the future (never used again: first), ties by least recent
  touch. It knows the future, so it bounds what an online policy could reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.policies.base import BoundedPolicy, PolicyOptions
from prefixscope.analysis.policies.lru import _kernel
from prefixscope.analysis.policies.rows import owners
from prefixscope.analysis.trace.csr import Trace


@dataclass(frozen=True)
class Belady(BoundedPolicy):
    name: str = "belady"
    label: str = "Belady (offline optimal)"

    def _run(self, trace: Trace, capacity: int, options: PolicyOptions):  # type: ignore[no-untyped-def]
        track = len(trace.tenants) > 1
        return _kernel().belady(
            trace.offsets,
            trace.blocks,
            trace.tenant_codes,
            trace.parent,
            trace.next_use,
            trace.n_unique,
            capacity,
            track,
            owners(trace, track),
        )

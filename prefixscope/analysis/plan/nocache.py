"""Prefix caching off, as a trace: every lookup a block never seen before or after.

Each lookup gets a fresh dense id (``0 .. n_lookups − 1`` in lookup order), so no block repeats
and no lookup can hit, in HBM, a DRAM tier or a store; everything else the loop reads is
unchanged: the requests, their arrivals, tokens and output tokens, the KV pool's capacity and
the step costs. So a fleet simulated on this trace is the same fleet with the engine's prefix
caching disabled (vLLM ``--no-enable-prefix-caching``), every prompt computed in full: the trace
``Fleet(prefix_caching=False)`` runs (``fleet/run.py``), where a KV pool also keeps no cache at
all (``fleet/_pool.py``).

Each fresh id keeps the 64-bit hash of the block it stands for, so a router that hashes the
prompt (``session`` without session ids hashes its k-th block) sends every request where it
sent it with caching on: the comparison changes the cache, not the routing.
"""

from __future__ import annotations

from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.tail import span


def without_prefix_cache(trace: Trace) -> Trace:
    """``trace`` with every lookup a fresh block (the module docstring): ``span``'s ``fresh``
    form over the whole trace, the one the SLO search cuts its windows with."""
    if trace.n_requests == 0:
        return trace  # no lookup to make fresh
    return span(trace, 0, trace.n_requests, fresh=True)

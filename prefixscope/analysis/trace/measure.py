"""What a hit rate is measured over: hit tokens, and the fleet-then-tenant grouping of rows.

Every table with a ``tenant`` column has one row for the whole fleet (``tenant = '*'``), then
one per tenant; the fleet row comes first and counts every measured row once.
"""

from __future__ import annotations

import numpy as np

from prefixscope.analysis.trace.csr import Trace
from prefixscope.tenants import FLEET  # the tenant of fleet-wide rows (all tenants together)


def served_blocks(trace: Trace, hit_blocks: np.ndarray) -> np.ndarray:
    """The leading run of cached blocks a request is served from: ``hit_blocks``, less one when
    every block of a whole-block prompt of a token source hit (vLLM always computes the last
    prompt token, so the last block is recomputed; ``Trace.recomputes_last_block``). The one
    place this rule is applied to a replay's outcome (idempotent)."""
    full = trace.recomputes_last_block & (hit_blocks >= trace.blocks_per_request)
    return (hit_blocks - full).astype(hit_blocks.dtype)


def hit_tokens(trace: Trace, hit_blocks: np.ndarray) -> np.ndarray:
    """Tokens served from cache per request: ``block_size`` per served block
    (:func:`served_blocks`), capped at ``input_tokens``. When a hash-id trace's partial last
    block hits, it so counts its own tokens; token sources never hash a partial tail, so it is
    never served from cache, and a whole-block prompt's last block is always recomputed."""
    served = served_blocks(trace, hit_blocks).astype(np.int64)
    return np.minimum(served * trace.block_size, trace.input_tokens)


def groups(
    tenant_codes: np.ndarray,
    tenants: tuple[str, ...] | list[str],
    measured: np.ndarray | None = None,
    keep_empty: bool = False,
) -> list[tuple[str, np.ndarray]]:
    """The fleet, then each tenant in code order: (name, mask over rows). ``measured`` limits
    the rows; a tenant with no measured row is left out unless ``keep_empty``."""
    measured = np.ones(len(tenant_codes), dtype=bool) if measured is None else measured
    out = [(FLEET, measured)]
    for code, name in enumerate(tenants):
        mask = measured & (tenant_codes == code)
        if keep_empty or mask.any():
            out.append((name, mask))
    return out


def index_groups(
    tenant_codes: np.ndarray, tenants: tuple[str, ...] | list[str], measured: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    """:func:`groups` as row positions (ascending, so sums over them add the same numbers in
    the same order as over the masks): one sort for every tenant, where masks cost a pass over
    all rows per tenant. The fleet always; a tenant only with measured rows."""
    rows = np.flatnonzero(measured)
    codes = tenant_codes[rows]
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(tenants)) if len(rows) else np.zeros(0, np.int64)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    out = [(FLEET, rows)]
    for code in np.flatnonzero(counts):
        out.append((tenants[code], rows[order[bounds[code] : bounds[code + 1]]]))
    return out


def trace_index_groups(trace: Trace, measured: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """:func:`index_groups` over a trace's requests."""
    return index_groups(trace.tenant_codes, trace.tenants, measured)


def named_groups(tenant_names: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """:func:`groups` over rows that carry tenant names (sorted by name, as a trace's are)."""
    text = np.asarray(tenant_names, dtype=object).astype(str)
    names, codes = np.unique(text, return_inverse=True)
    return groups(codes.ravel(), [str(n) for n in names])


def members(trace: Trace, measured: np.ndarray) -> list[tuple[str, int]]:
    """The fleet (code -1), then each tenant with measured requests: (name, tenant code)."""
    present = np.unique(trace.tenant_codes[measured])
    return [(FLEET, -1)] + [(trace.tenants[c], int(c)) for c in present]

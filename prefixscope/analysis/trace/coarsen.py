"""A trace at a larger block size: the block-size what-if, without the prompts' text.

A chained block hash names its whole prefix: two requests share the hash at position p exactly
when their first ``(p + 1) × block_size`` tokens are equal. So a block of m times the size is
named by the fine chain's hash at its last fine position, and the coarse chain is every m-th
fine hash: the same classes of equal prefixes as hashing the token ids again at the larger
size. A finer block size cannot be recovered (the hashes do not say where inside a block two
prompts part), so a trace is only ever coarsened, by whole multiples.

- token sources hash whole blocks only: ``floor(input / size)`` blocks, so a request keeps
  ``n // m`` coarse blocks of its ``n`` fine ones;
- hash-id traces name a partial last block too: ``ceil(input / size)`` blocks, so
  ``ceil(n / m)``, the last named by the request's last fine hash.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from prefixscope.analysis.trace.csr import Trace


def check_block_size(trace: Trace, block_size: int) -> None:
    """Refuse a block size ``trace`` cannot be coarsened to, with the advice its source allows:
    a token source (whose text or token ids were hashed here) can be ingested again at any
    size; a hash-id trace (mooncake, bailian: the log's own block ids) cannot be made finer
    by anything, so only whole multiples of its size can be asked for."""
    own = trace.block_size
    if block_size >= own and block_size % own == 0:
        return
    multiples = f"whole multiples of {own} ({2 * own}, {4 * own}, ...)"
    if hash_ids(trace):
        raise ValueError(
            f"the trace's blocks are {own} tokens, named by the log's own hash ids, which cannot "
            f"be split or regrouped at {block_size} — give --block-size {multiples}"
        )
    raise ValueError(
        f"the trace's blocks are {own} tokens: it can be simulated at {multiples}, never at "
        f"{block_size} — ingest the log again with --block-size {block_size}"
    )


def hash_ids(trace: Trace) -> bool:
    """Whether any of ``trace``'s requests came with its block ids (a hash-id format), rather
    than from token ids hashed at ingest (which follow the last-token rule)."""
    return trace.last_token_rule is None or not bool(trace.last_token_rule.all())


def coarsen(trace: Trace, block_size: int) -> Trace:
    """``trace`` with blocks of ``block_size`` tokens, a whole multiple of its own."""
    if block_size == trace.block_size:
        return trace
    check_block_size(trace, block_size)
    m = block_size // trace.block_size
    n = trace.blocks_per_request
    whole = (
        np.zeros(trace.n_requests, bool) if trace.last_token_rule is None else trace.last_token_rule
    )
    count = np.where(whole, n // m, -(-n // m))
    first = np.repeat(trace.offsets[:-1], count)
    j = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    last = np.repeat(n, count)
    picked = trace.blocks[first + np.minimum((j + 1) * m, last) - 1]
    unique, dense = np.unique(picked, return_inverse=True)
    return replace(
        trace,
        block_size=block_size,
        offsets=np.concatenate(([0], np.cumsum(count))).astype(np.int64),
        blocks=dense.astype(np.int32).ravel(),
        n_unique=len(unique),
        hashes=trace.hashes[unique],
    )

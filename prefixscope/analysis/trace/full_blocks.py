"""A trace as vLLM hashes it: full blocks only, and the prompt's last token always computed.

vLLM v1 hashes a request's full blocks and never a partial one (``hash_request_tokens`` in
``vllm/v1/core/kv_cache_utils.py``), and looks a prompt up to its last token but one
(``get_computed_blocks`` in ``kv_cache_manager.py``: ``max_cache_hit_length =
request.num_tokens - 1``), so a whole-block prompt that is all cached still computes its last
block. A token source already follows both rules (its ``last_token_rule``). A hash-id trace
(Mooncake's ``hash_ids``) names one block per ``block_size`` tokens, rounded up: its last id
names a partial block unless the prompt is a whole number of blocks. Here that id is dropped
(its tokens are computed every time, as a hashless block's), and the last-token rule set.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.tail import by_first_lookup


def full_blocks_only(trace: Trace) -> Trace:
    """``trace`` with each request's partial last block left out and the last-token rule set
    for every request, with its own dense ids (numbered by first lookup); the trace itself
    where it follows both rules already."""
    n = trace.blocks_per_request
    # a token source's rows name full blocks only; a row that names more blocks than its
    # tokens fill (a trace put together by hand) has its partial one dropped all the same,
    # so that no engine caches a block its prompt never fills
    partial = (n > 0) & (n * trace.block_size > trace.input_tokens)
    if trace.last_token_rule is not None and trace.last_token_rule.all() and not partial.any():
        return trace
    keep = np.ones(trace.n_lookups, bool)
    keep[trace.offsets[1:][partial] - 1] = False
    kept = trace.blocks[keep]
    dense, ids = by_first_lookup(kept, trace.n_unique)
    offsets = np.concatenate(([0], np.cumsum(n - partial))).astype(np.int64)
    return replace(
        trace,
        offsets=offsets,
        blocks=dense,
        n_unique=len(ids),
        hashes=trace.hashes[ids],
        last_token_rule=np.ones(trace.n_requests, bool),
    )

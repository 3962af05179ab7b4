"""One fleet outcome from its replicas run apart: a fixed router's replicas share nothing, so
each can run alone (``simulate_replica``, on Dask) and their outcomes join here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prefixscope.analysis.fleet.run import Fleet, FleetOutcome
from prefixscope.analysis.trace.csr import Trace


def merge_replicas(
    trace: Trace, fleet: Fleet, parts: Sequence[tuple[np.ndarray, FleetOutcome]]
) -> FleetOutcome:
    """One outcome from per-replica runs (``(requests, outcome)`` in replica order)."""
    n = trace.n_requests
    per_request = {
        k: np.zeros((n, *v.shape[1:]), v.dtype) for k, v in _request_arrays(parts[0][1]).items()
    }
    for i, (requests, part) in enumerate(parts):
        for k, v in _request_arrays(part).items():
            per_request[k][requests] = v
        per_request["replica"][requests] = i

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for _, p in parts])

    filled = np.array(
        [req[p.filled_at[0]] if p.filled_at[0] >= 0 else -1 for req, p in parts], np.int64
    )
    return FleetOutcome(
        fleet,
        trace.times / fleet.load_scale,
        per_request["replica"],
        per_request["hit_blocks"],
        per_request["hit_tokens"],
        per_request["ttft"],
        per_request["first_start"],
        per_request["done_at"],
        cat("busy"),
        cat("steps"),
        cat("prefill_tokens"),
        cat("decode_tokens"),
        filled,
        cat("drained_at"),
        per_request["source_tokens"],
        per_request["source_saved_s"],
        per_request["transfer_s"],
        per_request["no_cache_s"],
        cat("preemptions"),
        cat("running_blocks_mean"),
        cat("running_blocks_p95"),
        cat("prefix_cache_blocks_mean"),
        per_request["preempted"],
    )


def _request_arrays(o: FleetOutcome) -> dict[str, np.ndarray]:
    names = (
        "replica",
        "hit_blocks",
        "hit_tokens",
        "ttft",
        "first_start",
        "done_at",
        "source_tokens",
        "source_saved_s",
        "transfer_s",
        "no_cache_s",
        "preempted",
    )
    return {k: getattr(o, k) for k in names}

"""The simulation at one capacity beside the reports, request by request: agreement per group
of requests, and the requests that disagree most, each with its first disagreeing block."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.curves.depths import NEVER
from prefixscope.analysis.trace.csr import Trace

#: Why a request disagrees, by its first disagreeing block: the engine reported it cached
#: though the log never showed it before (traffic outside the log, a warm start, other
#: tokens); the simulated cache had evicted it; the engine reported the last block of a
#: whole-block prompt, which vLLM recomputes (an engine without that rule); the engine reported
#: more blocks than the prompt has; the simulated cache still held it and the engine did not
#: report it (its cache had less room then, or another replica served the request).
CAUSES = ("unseen", "evicted", "last_token", "beyond_prompt", "kept")


@dataclass(frozen=True)
class Comparison:
    """Per request at ``capacity_blocks``: ``simulated`` and ``reported`` hit tokens, both in
    the comparison unit (int64; ``reported`` is -1 where the log has no count)."""

    capacity_blocks: int
    simulated: np.ndarray
    reported: np.ndarray

    @property
    def compared(self) -> np.ndarray:
        return self.reported >= 0


def agreement(trace: Trace, comparison: Comparison, rows: np.ndarray) -> dict[str, object]:
    """Agreement over the compared requests among ``rows`` (a mask): their count, tokens, the
    share that match exactly, the mean absolute error in tokens, the correlation (None when
    either side is constant), and how many the engine reported more or fewer for."""
    sel = rows & comparison.compared
    sim, rep = comparison.simulated[sel], comparison.reported[sel]
    n = int(sel.sum())
    out: dict[str, object] = {
        "requests": int(rows.sum()),
        "compared": n,
        "input_tokens": int(trace.input_tokens[sel].sum()),
        "reported_hit_tokens": int(rep.sum()),
        "simulated_hit_tokens": int(sim.sum()),
        "exact_match_share": None,
        "mean_abs_error_tokens": None,
        "correlation": None,
        "reported_more": int((rep > sim).sum()),
        "reported_fewer": int((rep < sim).sum()),
    }
    if n:
        out["exact_match_share"] = float((sim == rep).mean())
        out["mean_abs_error_tokens"] = float(np.abs(sim - rep).mean())
        if n > 1 and sim.std() > 0 and rep.std() > 0:
            out["correlation"] = float(np.corrcoef(sim, rep)[0, 1])
    return out


def reported_only(trace: Trace, reported: np.ndarray, rows: np.ndarray) -> dict[str, object]:
    """What ``agreement`` says of ``rows`` without a fitted capacity: the reports alone
    (``reported``: per request in the comparison unit, -1 where not compared)."""
    sel = rows & (reported >= 0)
    return {
        "requests": int(rows.sum()),
        "compared": int(sel.sum()),
        "input_tokens": int(trace.input_tokens[sel].sum()),
        "reported_hit_tokens": int(reported[sel].sum()),
    }


def disagreements(
    trace: Trace, comparison: Comparison, top: int, depth: np.ndarray | None = None
) -> list[dict[str, object]]:
    """The ``top`` compared requests whose simulated and reported hit tokens differ most
    (ties: earlier first), each with its first disagreeing block: the block one side counts as
    cached and the other does not (its position, hash, cause, and with ``depth`` from
    ``depths.hit_capacities`` the smallest LRU capacity at which the simulation reaches past
    it; None when nothing earlier in the log holds it)."""
    error = comparison.simulated - comparison.reported
    off = np.flatnonzero(comparison.compared & (error != 0))
    order = off[np.lexsort((off, -np.abs(error[off])))][:top]
    first_use = trace.first_lookup
    seen_before = np.ones(trace.n_lookups, bool)
    seen_before[first_use] = False
    bs = trace.block_size
    rows = []
    for rank, r in enumerate(order, start=1):
        sim, rep = int(comparison.simulated[r]), int(comparison.reported[r])
        n_blocks = int(trace.blocks_per_request[r])
        k = min(sim, rep) // bs
        p = int(trace.offsets[r]) + k
        inside = k < n_blocks
        if rep < sim:
            cause = "kept"
        elif not inside:
            cause = "beyond_prompt"
        elif k == n_blocks - 1 and trace.recomputes_last_block[r]:
            cause = "last_token"
        elif not seen_before[p]:
            cause = "unseen"
        else:
            cause = "evicted"
        need = None
        if depth is not None and inside and depth[p] != NEVER:
            need = int(depth[p])
        rows.append(
            {
                "rank": rank,
                "request": int(r),
                "reported_hit_tokens": rep,
                "simulated_hit_tokens": sim,
                "error_tokens": sim - rep,
                "first_disagreeing_block": k,
                "block_hash": int(trace.hashes[trace.blocks[p]]) if inside else None,
                "hit_capacity_blocks": need,
                "cause": cause,
            }
        )
    return rows

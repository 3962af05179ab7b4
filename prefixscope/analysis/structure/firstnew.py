"""Where reuse breaks: the position of each request's first never-seen block (no earlier
request looked it up). Everything from there on is new to any cache, since hashes are chained.

A spike near the start (many requests whose first new block is within the first few hundred
tokens) is the signature of per-request content early in the prompt, a timestamp or an id in a
system prompt, which turns a shareable prompt into a unique one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.policies.ceiling import Ceiling
from prefixscope.analysis.trace.csr import Trace

#: A spike is "near the start" when its bin begins before this many tokens ...
EARLY_TOKENS = 1024
#: ... and holds at least this share of the tenant's requests.
SPIKE_SHARE = 0.2


def first_new(trace: Trace) -> np.ndarray:
    """Per request, the 0-based position of its first never-seen block; its block count when
    every block was seen before. (The leading run an infinite cache hits.)"""
    return Ceiling().replay(trace).hit_blocks.astype(np.int64)


def block_edges(max_blocks: int) -> np.ndarray:
    """Bin edges in blocks: one bin per position up to 8, then about √2 apart."""
    edges = list(range(9))
    step = 8
    while edges[-1] <= max_blocks:
        edges += [edges[-1] + step // 2, edges[-1] + step]
        step *= 2
    return np.asarray(edges, np.int64)


@dataclass(frozen=True)
class Bin:
    """One histogram row: requests whose first new block is in [from_block, to_block); both
    None for requests with no new block."""

    from_block: int | None
    to_block: int | None
    requests: int
    input_tokens: int
    novel_tokens: int


def histogram(
    trace: Trace, position: np.ndarray, mask: np.ndarray, n_blocks: np.ndarray | None = None
) -> list[Bin]:
    """The histogram of the ``mask`` requests (a mask, or ascending indices); ``n_blocks``:
    ``trace.blocks_per_request``, where already at hand."""
    n_blocks = (trace.blocks_per_request if n_blocks is None else n_blocks)[mask]
    pos, tokens = position[mask], trace.input_tokens[mask]
    novel = np.maximum(tokens - pos * trace.block_size, 0)
    new = pos < n_blocks
    out = [Bin(None, None, int((~new).sum()), int(tokens[~new].sum()), 0)] if (~new).any() else []
    if not new.any():
        return out
    edges = block_edges(int(pos[new].max()))
    which = np.searchsorted(edges, pos[new], side="right") - 1
    for i in np.unique(which):
        sel = which == i
        out.append(
            Bin(
                int(edges[i]),
                int(edges[i + 1]),
                int(sel.sum()),
                int(tokens[new][sel].sum()),
                int(novel[new][sel].sum()),
            )
        )
    return out


def finding(
    rows: list[dict], block_size: int, early_tokens: int = EARLY_TOKENS, spike: float = SPIKE_SHARE
) -> str:
    """The histogram of one tenant (rows with from_block, to_block, requests, input_tokens,
    novel_tokens) in plain words."""
    total = sum(r["requests"] for r in rows)
    tokens = sum(r["input_tokens"] for r in rows)
    binned = [r for r in rows if r["from_block"] is not None]
    if not total or not binned:
        return "Every request's blocks were all seen before: nothing breaks reuse."
    # The densest bin (requests per block of width) is the spike candidate.
    top = max(binned, key=lambda r: r["requests"] / (r["to_block"] - r["from_block"]))
    share = top["requests"] / total
    where = _where(top, block_size)
    cost = top["novel_tokens"] / tokens if tokens else 0.0
    if top["from_block"] * block_size < early_tokens and share >= spike:
        if top["from_block"] == 0:
            cause = (
                "these requests share not even their first block with any earlier request: "
                "a timestamp or id at the very start of the prompt does this, as do prompts "
                "with nothing in common"
            )
        else:
            cause = (
                "right after a shared start: per-request content early in the prompt (a "
                "timestamp or an id in the system prompt) does this, as do new conversations "
                "after a short shared system prompt"
            )
        return (
            f"Spike near the start: {share:.0%} of requests meet their first never-seen block "
            f"{where}; {cause}. From there on their prompts are new to the cache: "
            f"{cost:.1%} of input tokens, the most that moving such content to the end of the "
            "prompt could win back (for logs with text, `prefixscope ingest --move-to-end "
            "REGEX` into a second warehouse and `prefixscope compare` measure it)."
        )
    return (
        f"No spike near the start: the most common place for a first never-seen block is {where}"
        f" ({share:.0%} of requests, {cost:.1%} of input tokens from there on)."
    )


def _where(row: dict, block_size: int) -> str:
    lo, hi = row["from_block"], row["to_block"]
    blocks = f"block {lo}" if hi == lo + 1 else f"blocks {lo}–{hi - 1}"
    return f"at {blocks} (tokens {lo * block_size:,}–{hi * block_size - 1:,})"

"""Where a request's answer comes back: the blocks of its next turn that hold the tokens it
generated, which is what a KV pool caches when it hashes generated blocks.

vLLM hashes every full block of a request's computed tokens, generated ones included
(``vllm/v1/request.py`` appends generated tokens to the request's block hashes as blocks
fill; ``kv_cache_manager.py`` caches them), and SGLang inserts a finished request's prompt and
output, page-aligned, into its radix tree (``cache_finished_req`` in
``python/sglang/srt/mem_cache/radix_cache.py``). So when the next turn of a conversation sends
the earlier answer back, those blocks hit. A trace names no generated block; the next turn
names them. For request ``a`` with next turn ``b`` (:func:`structure.turns.infer_parents`:
the latest earlier request whose blocks all lead ``b``'s; here the first such ``b``), ``b``'s
blocks at positions ``n_a .. (in_a + out_a - 1) // B - 1`` are the ones ``a``'s computed
tokens fill (``n_a``: ``a``'s full prompt blocks; the last generated token has no KV), capped
at ``b``'s own full blocks.

How sure that is: it holds when the next prompt repeats the answer verbatim, as chat templates
re-send the assistant turn. A template that rewrites the answer (a reasoning model whose
thinking is dropped from the history) makes those blocks differ; the trace cannot tell. On the
bundled hour 2,304 requests have such a next turn; 92.4% of those turns are at least as long
as prompt and answer together, and all 2,627 blocks at answer positions are first looked up in
the next turn itself, as an answer's blocks are (0.93% of the hour's prompt tokens;
``python benchmarks/answer_blocks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.structure.scan import full_blocks
from prefixscope.analysis.structure.turns import NONE, infer_parents
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import subset


@dataclass(frozen=True, eq=False)
class Answers:
    """Per request in replay order: the next turn that holds its answer (``NONE``: none) and
    how many of that turn's blocks, from the request's own block count on, its answer fills.
    Positions, not ids, so every view of the trace that keeps full blocks in place (such as
    ``full_blocks.full_blocks_only``) reads the same blocks. Invariant: ``count > 0`` exactly
    where ``child != NONE``; ``child > request``."""

    child: np.ndarray  # int64
    first: np.ndarray  # int32: the request's full prompt blocks, where the answer starts
    count: np.ndarray  # int32

    @staticmethod
    def none(n: int) -> Answers:
        return Answers(np.full(n, NONE, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int32))

    @property
    def n_blocks(self) -> int:
        return int(self.count.sum())


def answer_blocks(trace: Trace, output_tokens: np.ndarray) -> Answers:
    """The blocks of each request's next turn that its generated tokens fill (module doc)."""
    n = trace.n_requests
    out = Answers.none(n)
    if n == 0:
        return out
    parent, shared = infer_parents(trace)
    full = full_blocks(trace)
    b = np.nonzero(parent != NONE)[0]
    a = parent[b]
    whole = shared[b] == full[a]  # b repeats every full block of a: a's blocks are its prefix
    b, a = b[whole], a[whole]
    # the first next turn of each request: b is ascending, so the first occurrence of each a
    a, at = np.unique(a, return_index=True)
    b = b[at]
    computed = trace.input_tokens[a] + np.maximum(np.asarray(output_tokens)[a], 1) - 1
    count = np.minimum(computed // trace.block_size, full[b]) - full[a]
    keep = count > 0
    a, b, count = a[keep], b[keep], count[keep]
    out.child[a] = b
    out.first[a] = full[a]
    out.count[a] = count
    return out


def routed_answer_blocks(
    trace: Trace, output_tokens: np.ndarray, routing: np.ndarray | None
) -> Answers:
    """:func:`answer_blocks` per replica when the routing is known before the run (a fixed
    router): a request's answer is cached on its own replica, so its next turn there is the
    one that reads it. Each replica's stream alone gives the same answers, so a replica run
    by itself (``fleet.run.simulate_replica``) caches what it caches in the whole fleet."""
    if routing is None or len(routing) == 0 or int(routing.max()) == int(routing.min()):
        return answer_blocks(trace, output_tokens)
    out = Answers.none(trace.n_requests)
    output = np.asarray(output_tokens)
    slot = np.zeros(trace.n_unique, np.int32)  # ids numbered by first lookup: no sort
    for i in np.unique(routing):
        mine = np.flatnonzero(routing == i)
        part = answer_blocks(subset(trace, mine, slot), output[mine])
        has = part.child != NONE
        out.child[mine[has]] = mine[part.child[has]]
        out.first[mine] = part.first
        out.count[mine] = part.count
    return out


def answer_ids(trace: Trace, answers: Answers) -> tuple[np.ndarray, np.ndarray]:
    """The answers as CSR ids of ``trace`` (offsets per request, ids): each request's next
    turn's blocks at its answer's positions."""
    offsets = np.zeros(trace.n_requests + 1, np.int64)
    np.cumsum(answers.count, out=offsets[1:])
    a = np.flatnonzero(answers.count)
    start = trace.offsets[answers.child[a]] + answers.first[a]
    count = answers.count[a].astype(np.int64)
    # every position of every answer: start repeated, plus 0..count-1
    step = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[a], count)
    ids = trace.blocks[np.repeat(start, count) + step].astype(np.int32)
    return offsets, ids

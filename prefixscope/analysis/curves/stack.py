"""Compiled loops of the one-pass LRU curve (``mrc.py``).

LRU that touches a request's blocks deepest first and evicts the least recent block is a stack
algorithm: after every request the cache of capacity C holds the C most recently touched blocks,
whatever C. So a block is cached at capacity C iff its *stack depth* (how many distinct blocks
were touched at or after its latest touch, itself included) is at most C, and one pass that
records each lookup's depth answers every capacity at once.

Depths come from a Fenwick tree over touch positions that counts the *dead* ones (positions
superseded by a later touch of the same block): the live positions in ``[x, clock]`` are
``clock - x + 1`` minus the dead ones there. A first touch costs nothing; only a repeated touch
pays one tree update, and a lookup one prefix query.

Nothing materializes a depth per capacity: each lookup is reduced at once to the index of the
first listed capacity that holds it (its *bucket*), and a hit-token histogram over buckets,
cumulated, is the curve at the listed capacities.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(inline="always")
def _tokens(left, block_size):  # type: ignore[no-untyped-def]
    # The token-per-lookup rule of ``trace.csr.block_tokens``: ``left`` is the prompt's tokens
    # from this block on.
    return min(max(left, 0), block_size)


@numba.njit(inline="always")
def _popcount(v):  # type: ignore[no-untyped-def]
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (v * np.uint64(0x0101010101010101)) >> np.uint64(56)


@numba.njit(inline="always")
def _dead_before(tree, words, x):  # type: ignore[no-untyped-def]
    """Dead positions in ``1 .. x-1``: whole chunks of 64 from the tree, the rest by bits."""
    c = x >> 6
    s = 0
    i = c
    while i > 0:
        s += tree[i]
        i &= i - 1
    below = words[c] & ((np.uint64(1) << np.uint64(x & 63)) - np.uint64(1))
    return s + np.int64(_popcount(below))


@numba.njit(inline="always")
def _bucket(points, worst, depth):  # type: ignore[no-untyped-def]
    """The first index ``j >= worst`` with ``points[j] >= depth`` (``len(points)``: none).
    Buckets only grow along a request, so the search starts at the current one, and most
    lookups stay within it, which needs no search."""
    n = points.size
    if worst < n and depth <= points[worst]:
        return worst
    lo, hi = worst, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if points[mid] < depth:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(inline="always")
def _add_dead(tree, n_chunks, c, count):  # type: ignore[no-untyped-def]
    i = c + 1  # chunk c is tree index c + 1
    while i <= n_chunks:
        tree[i] += count
        i += i & -i


def trace_stack_curve(trace, points, groups, keep_buckets=False, lookup_tokens=None):  # type: ignore[no-untyped-def]
    """:func:`stack_curve` over a :class:`~prefixscope.analysis.trace.Trace`, its groups
    numbered by tenant code."""
    return stack_curve(
        trace.offsets,
        trace.blocks,
        trace.n_unique,
        points,
        trace.servable_tokens,  # token weights: the last-token rule (csr.py)
        trace.block_size,
        groups,
        len(trace.tenants),
        keep_buckets,
        lookup_tokens,
    )


def stack_curve(  # type: ignore[no-untyped-def]
    offsets,
    blocks,
    n_unique,
    points,
    input_tokens,
    block_size,
    groups,
    n_groups,
    keep_buckets,
    lookup_tokens=None,
):
    """One pass: hit tokens by (row, group, bucket), and per lookup its bucket when
    ``keep_buckets``. A lookup's bucket is the first index ``j`` of the sorted ``points`` with
    ``points[j] >=`` the largest stack depth among the request's blocks up to this one
    (``len(points)``: a miss at every listed capacity). The running maximum is the leading-run
    rule: block ``k`` hits at capacity C iff blocks ``0..k`` all do (with chained hashes an
    ancestor is always above its descendants, so the maximum is the block's own depth).
    ``groups[w, r]`` is request ``r``'s group in row ``w`` (-1: not counted there); a lookup at
    position ``k`` holds ``clip(input_tokens - k * block_size, 0, block_size)`` tokens, so a
    leading run of ``h`` blocks serves ``min(h * block_size, input_tokens)``, the simulator's
    rule. ``lookup_tokens`` (one per lookup) replaces that rule when a request's lookups are not
    its leading blocks (a block sample keeps some blocks of each request, each weighing what it
    weighs in the full request). Depths are taken before the request touches anything; then its
    blocks are touched deepest first, as the LRU kernel does."""
    # The large arrays come from numpy, which asks for huge pages; the compiled loop's own
    # allocations would page-fault through millions of distinct blocks.
    total = blocks.size
    n_chunks = (total >> 6) + 1
    return _stack_curve_loop(
        offsets,
        blocks,
        points,
        input_tokens,
        block_size,
        groups,
        np.zeros((groups.shape[0], n_groups, points.size + 1), np.int64),
        np.empty(total if keep_buckets else 0, np.int32),
        np.zeros(n_unique, np.int32),  # latest touch position of each block, 0: never
        # Dead positions: a bit each, and a Fenwick tree of their count per chunk of 64
        # positions (small enough to stay in the CPU caches).
        np.zeros(n_chunks, np.uint64),
        np.zeros(n_chunks + 1, np.int32),
        keep_buckets,
        np.zeros(0, np.int32) if lookup_tokens is None else lookup_tokens,
    )


@numba.njit(cache=True, nogil=True)
def _stack_curve_loop(  # type: ignore[no-untyped-def]
    offsets,
    blocks,
    points,
    input_tokens,
    block_size,
    groups,
    hist,
    out,
    last,
    words,
    tree,
    keep_buckets,
    lookup_tokens,
):
    sized = lookup_tokens.size > 0
    n = offsets.size - 1
    n_points = points.size
    rows = groups.shape[0]
    n_chunks = words.size
    clock = 0  # touches so far: positions 1..clock are used
    dead = 0
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        worst = 0
        prev_x = -1
        depth = 0
        left = input_tokens[r]
        for p in range(start, end):
            x = np.int64(last[blocks[p]])
            if x == 0:
                worst = n_points  # never touched: a miss at every capacity
            else:
                if x == prev_x - 1:
                    # The usual case: the block was touched right before the previous one (the
                    # last request of a conversation touched its chain in one run), and a
                    # latest touch is live, so it lies exactly one deeper: no tree query.
                    depth += 1
                elif x != prev_x:  # (equal: the same block again, the same depth)
                    depth = clock - x + 1 - (dead - _dead_before(tree, words, x))
                prev_x = x
                worst = _bucket(points, worst, depth)
            if worst == n_points:
                # A miss at every listed capacity, and so is the rest of the request; the last
                # bucket is never counted, so there is nothing more to tally.
                if keep_buckets:
                    out[p:end] = n_points
                break
            if keep_buckets:
                out[p] = worst
            if sized:
                tokens = np.int64(lookup_tokens[p])
            else:
                tokens = _tokens(left, block_size)
                left -= block_size
            for w in range(rows):
                g = groups[w, r]
                if g >= 0:
                    hist[w, g, worst] += tokens
        pending_chunk = -1  # a request's old positions are mostly runs: one tree update a chunk
        pending = 0
        for p in range(end - 1, start - 1, -1):  # deepest first: it is the least recent
            b = blocks[p]
            x = np.int64(last[b])
            if x > 0:
                words[x >> 6] |= np.uint64(1) << np.uint64(x & 63)
                dead += 1
                if x >> 6 != pending_chunk:
                    if pending:
                        _add_dead(tree, n_chunks, pending_chunk, pending)
                    pending_chunk = x >> 6
                    pending = 0
                pending += 1
            clock += 1
            last[b] = clock
        if pending:
            _add_dead(tree, n_chunks, pending_chunk, pending)
    return hist, out


@numba.njit(cache=True, nogil=True)
def tally(buckets, offsets, input_tokens, block_size, groups, n_groups, n_buckets):  # type: ignore[no-untyped-def]
    """Hit tokens by (row, group, bucket): ``groups[w, r]`` is request ``r``'s group in row
    ``w`` (-1: not counted there). A lookup at position ``k`` holds
    ``clip(input_tokens - k * block_size, 0, block_size)`` tokens, so a leading run of ``h``
    blocks serves ``min(h * block_size, input_tokens)`` tokens, the simulator's rule."""
    rows, n = groups.shape
    out = np.zeros((rows, n_groups, n_buckets), np.int64)
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        left = input_tokens[r]
        for p in range(start, end):
            tokens = _tokens(left, block_size)
            left -= block_size
            bucket = buckets[p]
            for w in range(rows):
                g = groups[w, r]
                if g >= 0:
                    out[w, g, bucket] += tokens
    return out


@numba.njit(cache=True, nogil=True)
def suffix_tally(buckets, offsets, input_tokens, block_size, tenants, n_tenants, starts):  # type: ignore[no-untyped-def]
    """Per tenant and listed capacity ``j``: the hit tokens at ``points[j]`` of the requests at
    positions ``>= starts[j]`` (a per-capacity measure window, e.g. after the warm-up)."""
    n = offsets.size - 1
    n_points = starts.size
    hist = np.zeros((n_tenants, n_points + 1), np.int64)
    out = np.zeros((n_tenants, n_points), np.int64)
    order = np.argsort(-starts, kind="mergesort")  # latest start first
    q = 0
    while q < n_points and starts[order[q]] >= n:  # nothing measured
        q += 1
    for r in range(n - 1, -1, -1):
        t = tenants[r]
        left = input_tokens[r]
        for p in range(offsets[r], offsets[r + 1]):
            hist[t, buckets[p]] += _tokens(left, block_size)
            left -= block_size
        while q < n_points and starts[order[q]] >= r:
            j = order[q]
            for g in range(n_tenants):
                s = 0
                for b in range(j + 1):
                    s += hist[g, b]
                out[g, j] = s
            q += 1
    return out


def weighted_stack_curve(  # type: ignore[no-untyped-def]
    offsets, blocks, n_unique, points, input_tokens, groups, n_groups, lookup_tokens, head, rate
):
    """The sampled curve of a block sample that keeps some blocks whole (``head[p]``: lookup
    ``p``'s block is one of them) and the others at ``rate``. A full-scale depth is about
    ``heads + others / rate`` (``heads``, ``others``: the distinct kept blocks of each kind at
    or above the block), so on the sample's scale (capacities times ``rate``, as
    ``stack_curve`` reads a block sample) it is ``rate * heads + others``: one pass counts the
    live positions of both kinds. Hit tokens go to ``hist[w, g, bucket]`` for a sampled block
    and to ``hist[w, n_groups + g, bucket]`` for a block kept whole, so an estimator can weigh
    them apart. At ``rate == 1`` the depth is the plain count, and this is ``stack_curve``."""
    total = blocks.size
    n_chunks = (total >> 6) + 1
    return _weighted_loop(
        offsets,
        blocks,
        points,
        input_tokens,
        groups,
        np.zeros((groups.shape[0], 2 * n_groups, points.size + 1), np.int64),
        n_groups,
        np.zeros(n_unique, np.int32),
        np.zeros(n_chunks, np.uint64),  # dead positions, all kinds
        np.zeros(n_chunks + 1, np.int32),
        np.zeros(n_chunks, np.uint64),  # dead positions of blocks kept whole
        np.zeros(n_chunks + 1, np.int32),
        np.zeros(total + 1, np.int32),  # touches of blocks kept whole at positions 1..x
        lookup_tokens,
        head,
        float(rate),
    )


@numba.njit(cache=True, nogil=True)
def _weighted_loop(  # type: ignore[no-untyped-def]
    offsets,
    blocks,
    points,
    input_tokens,
    groups,
    hist,
    n_groups,
    last,
    words,
    tree,
    head_words,
    head_tree,
    head_touches,
    lookup_tokens,
    head,
    rate,
):
    n = offsets.size - 1
    n_points = points.size
    rows = groups.shape[0]
    n_chunks = words.size
    clock = 0
    dead = 0
    head_dead = 0
    for r in range(n):
        start, end = offsets[r], offsets[r + 1]
        worst = 0
        prev_x = -1
        heads = 0  # live positions of blocks kept whole in [x, clock]
        others = 0  # the other live positions there
        for p in range(start, end):
            x = np.int64(last[blocks[p]])
            if x == 0:
                worst = n_points
            else:
                if x == prev_x - 1:
                    # Right below the previous block, and live: one block deeper, of its kind.
                    if head_touches[x] != head_touches[x - 1]:
                        heads += 1
                    else:
                        others += 1
                elif x != prev_x:
                    live = clock - x + 1 - (dead - _dead_before(tree, words, x))
                    touched = head_touches[clock] - head_touches[x - 1]
                    heads = touched - (head_dead - _dead_before(head_tree, head_words, x))
                    others = live - heads
                prev_x = x
                depth = rate * heads + others
                worst = _bucket(points, worst, depth)
            if worst == n_points:
                break  # a miss at every listed capacity, and so is the rest of the request
            tokens = np.int64(lookup_tokens[p])
            kind = n_groups if head[p] else 0
            for w in range(rows):
                g = groups[w, r]
                if g >= 0:
                    hist[w, kind + g, worst] += tokens
        for p in range(end - 1, start - 1, -1):  # deepest first, as stack_curve
            b = blocks[p]
            x = np.int64(last[b])
            if x > 0:
                bit = np.uint64(1) << np.uint64(x & 63)
                words[x >> 6] |= bit
                _add_dead(tree, n_chunks, x >> 6, 1)
                dead += 1
                if head_touches[x] != head_touches[x - 1]:  # the kind of that touch
                    head_words[x >> 6] |= bit
                    _add_dead(head_tree, n_chunks, x >> 6, 1)
                    head_dead += 1
            clock += 1
            head_touches[clock] = head_touches[clock - 1] + (1 if head[p] else 0)
            last[b] = clock
    return hist

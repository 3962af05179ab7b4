"""The uncertainty of a block-sampled curve: a delete-a-group jackknife over the sampled blocks.

A block sample is a draw of blocks (each in or out with all its references, by hash), so the
unit that varies from one sample to another is the sampled block. The blocks sampled at the
rate are dealt at random (seeded) into :data:`GROUPS` groups; replicate ``j`` leaves group
``j`` out and lets every other sampled block stand for ``G / (G - 1)`` blocks (blocks kept
whole are in every sample and in every replicate), and reruns the sampled curve: a block's
weight counts in every stack depth above it (so the depth noise of a small sample is in the
replicate, not only which blocks hit) and in the ratio estimator's tokens. With every weight 1
the kernel gives the sampled curve itself (tested).

The interval at a capacity is the estimate ± t(0.975, G − 1) · SE, with the jackknife's
``SE² = (G − 1) / G · Σ_j (θ_j − θ̄)²`` (the delete-a-group jackknife of survey sampling,
Wolter, *Introduction to Variance Estimation*, ch. 4), clipped to [0, 1] as a rate. It is a
sampling interval: it says how far another draw of blocks at the same rate could move the
estimate, not the bias a sample too small to resolve a depth gives every draw alike, nor that
of a hot block outside the sample (plain ``block`` sampling). Its measured coverage of the
exact curve (``benchmarks/sampled_interval.py``, docs/simulation.md) was 0.99 at 18,000 sampled
blocks, 0.93 at 1,600 and 0.84 at 130.

Depths are read from a Fenwick tree of the live weight at each touch position (a block's weight
sits at its latest touch): the depth of a block last touched at ``x`` is the live weight at
positions ``>= x``, itself included, on the sample's scale (a block kept whole weighs ``rate``,
as ``stack.weighted_stack_curve`` counts it).
"""

from __future__ import annotations

import numba
import numpy as np

#: Jackknife groups (replicates) of a sampled curve, t(0.975, GROUPS - 1), and the seed that
#: deals blocks into groups (the same interval on every run).
GROUPS = 20
T_975 = 2.093
SEED = 0


def group_weights(n_blocks: int, replicate: int, seed: int = SEED) -> np.ndarray:
    """Replicate ``replicate``'s weight of each of ``n_blocks`` sampled blocks: 0 in the group
    it leaves out, ``G / (G - 1)`` elsewhere."""
    group = np.random.default_rng(seed).integers(0, GROUPS, n_blocks)
    return np.where(group == replicate, 0.0, GROUPS / (GROUPS - 1))


def jackknife_band(replicates: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval of ``point`` from its leave-one-group-out ``replicates`` (replicate ×
    capacity; a NaN row: a replicate with nothing left to estimate from, left out)."""
    rows = replicates[~np.isnan(replicates).any(axis=1)]
    g = len(rows)
    if g < 2:
        return point.astype(float), point.astype(float)
    se = np.sqrt((g - 1) / g * ((rows - rows.mean(axis=0)) ** 2).sum(axis=0))
    return np.maximum(point - T_975 * se, 0.0), point + T_975 * se


def weighted_depth_curve(  # type: ignore[no-untyped-def]
    offsets, blocks, n_unique, points, groups, n_groups, lookup_tokens, whole, weight
):
    """One replicate's sampled curve: per window row, group and bucket, the hit tokens of the
    sampled blocks weighted by their weight (``hist[w, g, bucket]``) and of the blocks
    kept whole (``hist[w, n_groups + g, bucket]``), as ``stack.weighted_stack_curve`` lays them
    out. ``weight[b]``: block ``b``'s weight in a depth on the sample's scale (``rate`` for a
    block kept whole, its replicate weight otherwise); ``whole[p]``: lookup ``p``'s block is kept
    whole."""
    return _weighted_depth_loop(
        offsets,
        blocks,
        np.asarray(points, np.int64),
        groups,
        np.zeros((groups.shape[0], 2 * n_groups, points.size + 1), np.float64),
        n_groups,
        np.zeros(n_unique, np.int64),
        np.zeros(blocks.size + 1, np.float64),
        lookup_tokens,
        whole,
        weight,
    )


@numba.njit(inline="always")
def _below(tree, x):  # type: ignore[no-untyped-def]
    """Live weight at positions ``1 .. x``."""
    s = 0.0
    while x > 0:
        s += tree[x]
        x &= x - 1
    return s


@numba.njit(inline="always")
def _add(tree, x, w):  # type: ignore[no-untyped-def]
    while x < tree.size:
        tree[x] += w
        x += x & -x


@numba.njit(cache=True, nogil=True)
def _weighted_depth_loop(  # type: ignore[no-untyped-def]
    offsets, blocks, points, groups, hist, n_groups, last, tree, lookup_tokens, whole, weight
):
    n_points = points.size
    rows = groups.shape[0]
    clock = 0
    live = 0.0  # the weight of every block touched so far
    for r in range(offsets.size - 1):
        start, end = offsets[r], offsets[r + 1]
        worst = 0
        for p in range(start, end):
            b = blocks[p]
            if weight[b] == 0.0:
                continue  # not in this replicate
            x = last[b]
            if x == 0:
                break  # never seen: a miss at every capacity, and so is the rest
            depth = live - _below(tree, x - 1)
            # The running maximum (the leading-run rule); the slack absorbs the rounding of
            # sums of ``rate``, so a depth the plain kernel counts as c is not read as above c.
            while worst < n_points and points[worst] < depth - 1e-6:
                worst += 1
            if worst == n_points:
                break
            kind = n_groups if whole[p] else 0
            tokens = lookup_tokens[p] * (1.0 if whole[p] else weight[b])
            for w in range(rows):
                g = groups[w, r]
                if g >= 0:
                    hist[w, kind + g, worst] += tokens
        for p in range(end - 1, start - 1, -1):  # deepest first, as the curve's kernel
            b = blocks[p]
            wb = weight[b]
            if wb == 0.0:
                continue
            x = last[b]
            if x > 0:
                _add(tree, x, -wb)
            else:
                live += wb
            clock += 1
            _add(tree, clock, wb)
            last[b] = clock
    return hist

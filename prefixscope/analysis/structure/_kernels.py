"""The compiled passes the structure tables are built from, beside the replay-order scan of
:mod:`scan`. Each is one linear pass over the lookups (CSR ``offsets`` / ``blocks``) with
per-block state in arrays over dense ids; none sorts the lookups. The modules that call them
state what each computes; what every pass relies on is written here:

- requests come in replay order, so a block's first lookup is its earliest request, and a
  "last request seen" marker per block tells a repeat within one request from a new use;
- a walk over requests *grouped by an owner* (a session; ascending within it) sees a session's
  lookups together, so a "last owner seen" marker per block counts distinct owners, and the
  first request that marked it is the owner's earliest use.
"""

from __future__ import annotations

import numba
import numpy as np

NONE = -1


def by_owner(offsets, blocks, order, owner, n_unique, flags):  # type: ignore[no-untyped-def]
    """Walk the requests in ``order`` (grouped by ``owner``, ascending within an owner). Per
    dense id, how many distinct owners look it up; with ``flags``, per lookup whether an
    earlier request of the same owner looked the block up (else an empty array)."""
    return _by_owner(
        offsets,
        blocks,
        order,
        owner,
        flags,
        np.full(n_unique, NONE, np.int32),  # the current owner's first request using it
        np.zeros(n_unique, np.int32),
        np.zeros(blocks.size if flags else 0, np.bool_),
    )


@numba.njit(cache=True, nogil=True)
def _by_owner(offsets, blocks, order, owner, flags, first, count, earlier):  # type: ignore[no-untyped-def]
    # The walk sees an owner's requests together and in order, so the block's marked request
    # is this owner's exactly when this owner looked it up before; marked at the owner's
    # first use, it is earlier than this request unless that use is this request.
    for i in range(order.size):
        r = order[i]
        s = owner[r]
        for p in range(offsets[r], offsets[r + 1]):
            b = blocks[p]
            seen = first[b]
            if seen == NONE or owner[seen] != s:
                first[b] = r
                count[b] += 1
            elif flags and seen < r:
                earlier[p] = True
    return count, earlier


@numba.njit(cache=True, nogil=True)
def class_tokens(offsets, hit_blocks, cross, earlier, servable, block_size):  # type: ignore[no-untyped-def]
    """Per request the hit tokens of each class (other tenant, own session, shared prefix,
    in :data:`attribution.CLASSES` order): each hit block weighs what it serves."""
    n = offsets.size - 1
    out = np.zeros((n, 3), np.int64)
    has_cross = cross.size > 0
    for r in range(n):
        start = offsets[r]
        for k in range(hit_blocks[r]):
            p = start + k
            tokens = min(max(servable[r] - k * block_size, 0), block_size)
            if has_cross and cross[p]:
                out[r, 2] += tokens
            elif earlier[p]:
                out[r, 0] += tokens
            else:
                out[r, 1] += tokens
    return out


@numba.njit(cache=True, nogil=True)
def reuse_histogram(
    offsets, blocks, n_unique, times, tokens_in, block_size, group, edges, n_groups
):  # type: ignore[no-untyped-def]
    """Reuses and their tokens per (``group`` of the reusing request, gap bin). A use is a
    request's first lookup of a block; its gap is the time since the block's previous use by
    another request; bin i is (edges[i-1], edges[i]]."""
    n_bins = edges.size + 1
    counts = np.zeros((n_groups, n_bins), np.int64)
    tokens = np.zeros((n_groups, n_bins), np.int64)
    last = np.full(n_unique, NONE, np.int32)
    for r in range(offsets.size - 1):
        start = offsets[r]
        g = group[r]
        for p in range(start, offsets[r + 1]):
            b = blocks[p]
            before = last[b]
            if before == r:
                continue
            last[b] = r
            if before == NONE:
                continue
            k = np.searchsorted(edges, times[r] - times[before])
            counts[g, k] += 1
            tokens[g, k] += min(max(tokens_in[r] - (p - start) * block_size, 0), block_size)
    return counts, tokens


@numba.njit(cache=True, nogil=True)
def group_sums(codes, values, n_groups):  # type: ignore[no-untyped-def]
    """Column sums of ``values`` (int64, rows × k) per row code."""
    out = np.zeros((n_groups, values.shape[1]), np.int64)
    for i in range(codes.size):
        for j in range(values.shape[1]):
            out[codes[i], j] += values[i, j]
    return out


@numba.njit(cache=True, nogil=True)
def child_max(parent, values):  # type: ignore[no-untyped-def]
    """Per dense id, the largest of ``values`` over its children (0 without any), of
    ``values``' type."""
    out = np.zeros(parent.size, values.dtype)
    for c in range(parent.size):
        a = parent[c]
        if a != NONE and values[c] > out[a]:
            out[a] = values[c]
    return out


@numba.njit(cache=True, nogil=True)
def users_of(offsets, blocks, input_tokens, block_size, which, n_ends):  # type: ignore[no-untyped-def]
    """For the blocks with ``which[b] >= 0`` (an index below ``n_ends``): the requests that look
    each up, ascending (CSR: ``starts``, ``requests``), and the most tokens one of its lookups
    holds (0 where none)."""
    last = np.full(n_ends, NONE, np.int64)
    count = np.zeros(n_ends + 1, np.int64)
    tail = np.zeros(n_ends, np.int64)
    for r in range(offsets.size - 1):
        start = offsets[r]
        for p in range(start, offsets[r + 1]):
            i = which[blocks[p]]
            if i == NONE:
                continue
            tail[i] = max(
                tail[i], min(max(input_tokens[r] - (p - start) * block_size, 0), block_size)
            )
            if last[i] != r:
                last[i] = r
                count[i + 1] += 1
    starts = np.cumsum(count)
    requests = np.empty(starts[-1], np.int64)
    fill = starts[:-1].copy()
    last[:] = NONE
    for r in range(offsets.size - 1):
        for p in range(offsets[r], offsets[r + 1]):
            i = which[blocks[p]]
            if i != NONE and last[i] != r:
                last[i] = r
                requests[fill[i]] = r
                fill[i] += 1
    return starts, requests, tail

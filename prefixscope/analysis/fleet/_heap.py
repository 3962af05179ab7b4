"""An indexed binary min-heap in a segment of flat arrays, for the fleet loop.

Entries ``(key, item)`` live in ``key[base : base + n]`` and ``item[...]``; ``pos[item]`` is the
entry's index in its segment (-1: not in the heap), so an entry can be removed from anywhere
(a preempted request leaves its replica's decode heaps). Invariant: ``key[base + j] >=
key[base + (j - 1) // 2]``. Keys are unique where the order of equal keys would matter (the
loop adds the schedule sequence to its keys), so the pop order is the keys' order.
"""

from __future__ import annotations

from prefixscope.analysis.fleet._records import step_piece


@step_piece
def _place(key, item, pos, base, j, k, it):  # type: ignore[no-untyped-def]
    key[base + j] = k
    item[base + j] = it
    pos[it] = j


@step_piece
def _sift_up(key, item, pos, base, j, k, it):  # type: ignore[no-untyped-def]
    while j > 0:
        p = (j - 1) // 2
        if key[base + p] <= k:
            break
        _place(key, item, pos, base, j, key[base + p], item[base + p])
        j = p
    _place(key, item, pos, base, j, k, it)


@step_piece
def _sift_down(key, item, pos, base, n, j, k, it):  # type: ignore[no-untyped-def]
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and key[base + c + 1] < key[base + c]:
            c += 1
        if key[base + c] >= k:
            break
        _place(key, item, pos, base, j, key[base + c], item[base + c])
        j = c
    _place(key, item, pos, base, j, k, it)


@step_piece
def push(key, item, pos, sizes, h, base, k, it):  # type: ignore[no-untyped-def]
    """Add ``(k, it)`` to heap ``h`` (its segment starts at ``base``; ``sizes[h]``: its size)."""
    j = sizes[h]
    sizes[h] += 1
    _sift_up(key, item, pos, base, j, k, it)


@step_piece
def remove(key, item, pos, sizes, h, base, it):  # type: ignore[no-untyped-def]
    """Take ``it`` out of heap ``h`` (a no-op when it is not there)."""
    j = pos[it]
    if j < 0:
        return
    pos[it] = -1
    sizes[h] -= 1
    n = sizes[h]
    if j == n:
        return
    k, last = key[base + n], item[base + n]
    if j > 0 and key[base + (j - 1) // 2] > k:
        _sift_up(key, item, pos, base, j, k, last)
    else:
        _sift_down(key, item, pos, base, n, j, k, last)


@step_piece
def top_key(key, sizes, h, base, empty):  # type: ignore[no-untyped-def]
    """The smallest key of heap ``h``, or ``empty`` when it has none."""
    return key[base] if sizes[h] > 0 else empty

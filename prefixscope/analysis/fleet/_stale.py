"""A stale router view (``--router-delay``): what a KV-event-fed router knows of the replicas'
caches, ``Δ`` seconds behind them.

Every change of a replica's cache (``Sets.held``: a block cached or dropped) is logged with
the time it happened (``Sets.log_now``: the arrival or the step that made it) in that
replica's ring; at each routing decision at ``t`` the router's copy (``Sets.rview``) takes the
changes made at ``t − Δ`` or before, each replica's in its own order. So the router reads
every cache exactly as it was ``Δ`` ago, the way a router fed by the engines' KV events
(Dynamo's KV router, llm-d's precise prefix-cache scorer) sees them when the events take
``Δ`` to arrive. With ``Δ = 0`` nothing is logged and the router reads ``held`` itself.

Invariant: ``rview[b]`` bit ``i`` is ``held[b]`` bit ``i`` after replaying replica ``i``'s
logged changes up to the last one applied. A ring that fills applies its oldest change early
(``log_at[i, 2]`` counts them; the run reports it): the view is then fresher than ``Δ``.
"""

from __future__ import annotations

import numba

from prefixscope.analysis.fleet._sets import _bit


@numba.njit(inline="always")
def logged(sets):  # type: ignore[no-untyped-def]
    return sets.rview.size > 1


@numba.njit(inline="always")
def _apply(sets, i, e):  # type: ignore[no-untyped-def]
    b = sets.log_b[e]
    if sets.log_on[e]:
        sets.rview[b] |= _bit(i)
    else:
        sets.rview[b] &= ~_bit(i)


@numba.njit(inline="always")
def note(sets, i, b, on):  # type: ignore[no-untyped-def]
    """Replica ``i`` cached (``on``) or dropped block ``b`` now."""
    if not logged(sets):
        return
    cap = sets.log_t.size // sets.log_at.shape[0]
    head, count = sets.log_at[i, 0], sets.log_at[i, 1]
    if count == cap:  # full: the oldest change reaches the view early
        _apply(sets, i, i * cap + head)
        head = (head + 1) % cap
        count -= 1
        sets.log_at[i, 2] += 1
    e = i * cap + (head + count) % cap
    sets.log_t[e] = sets.log_now[0]
    sets.log_b[e] = b
    sets.log_on[e] = on
    sets.log_at[i, 0] = head
    sets.log_at[i, 1] = count + 1


@numba.njit(inline="always")
def catch_up(sets, cut, n_rep):  # type: ignore[no-untyped-def]
    """The view takes every change made at ``cut`` or before."""
    cap = sets.log_t.size // n_rep
    for i in range(n_rep):
        head, count = sets.log_at[i, 0], sets.log_at[i, 1]
        while count > 0 and sets.log_t[i * cap + head] <= cut:
            _apply(sets, i, i * cap + head)
            head = (head + 1) % cap
            count -= 1
        sets.log_at[i, 0] = head
        sets.log_at[i, 1] = count

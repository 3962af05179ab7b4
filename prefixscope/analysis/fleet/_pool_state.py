"""The KV pools' state for the compiled fleet loop (``_pool.py``): one record of arrays, built
here in Python and mutated in place by the loop, as ``_records.py`` builds the others."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from prefixscope.analysis.fleet._records import IDEAL, NONE, SGLANG, VLLM, node_array


class Pool(NamedTuple):
    """One KV pool per replica (vllm, sglang), over the same nodes as ``_records.Sets``.

    - ``refcnt``: running requests holding the block; ``free_n``: free blocks (vllm: the free
      queue's length; sglang: free plus evictable); ``cached_free``: free blocks that keep a
      hash (the prefix cache);
    - vllm's free queue is the list ``Sets.nxt``/``prv``; ``anon_before[v]``: hashless free
      blocks just before node ``v`` (at the sentinel: after the last node);
    - sglang: ``nchild`` cached children per block, ``stamp`` the release that last unlocked it,
      a heap of evictable leaves by stamp (``heap_*``), ``anon_free`` hashless free blocks;
      SGLang's radix nodes (``_pool.py``, "Radix nodes"): ``nstart`` whether a block begins
      its node, ``ncont`` the next block of its node (NONE: it ends it);
    - the running requests in schedule order (``rnext``/``rprev``, sentinel ``n + i``)."""

    refcnt: np.ndarray
    anon_before: np.ndarray
    free_n: np.ndarray
    cached_free: np.ndarray
    nchild: np.ndarray
    stamp: np.ndarray
    heap_key: np.ndarray
    heap_node: np.ndarray
    heap_n: np.ndarray
    heap_pos: np.ndarray
    anon_free: np.ndarray
    rnext: np.ndarray
    rprev: np.ndarray
    stamp_ctr: np.ndarray  # [releases so far] (sglang's stamps)
    ans_mine: np.ndarray  # per answer position: its request holds the block under that id
    # vllm's second copies of an id (``_pool.py``, "Second copies"): ``dup_of[v]`` the copy
    # of node ``v`` (NONE: none); per copy slot (``dup_slots`` per replica) the node it
    # copies and the answer position of the request holding it (NONE: free); a stack of
    # free slots per replica; per answer position, the copy its request holds (NONE: none)
    dup_of: np.ndarray
    dup_owner: np.ndarray
    dup_pos: np.ndarray
    dup_stack: np.ndarray
    dup_top: np.ndarray
    ans_copy: np.ndarray
    nstart: np.ndarray
    ncont: np.ndarray


def dup_slots(engine: int, capacity: int, answers: int) -> int:
    """Second copies a vllm replica can hold at once: each is a block of its pool, and each
    copies an id of some answer."""
    return min(capacity, answers) if engine == VLLM else 0


def pool(
    n: int,
    n_unique: int,
    n_rep: int,
    engine: int,
    capacity: int,
    answers: int = 0,
    caching: bool = True,
) -> Pool:
    """The pools' state. Its arrays over every replica's nodes are kept between runs inside
    ``_records.kept_nodes``, refilled with their starting values: 14 replicas of ``vllm`` on
    the generated week's first 8 hours (11.3 M lookups) ran in 4.7–4.8 s so, 5.2–5.6 s on
    fresh arrays, whose pages the system maps and zeroes as the run first touches them
    (benchmarks/RESULTS.md). With prefix caching off (``caching`` False) a pool is counts
    alone, no node per block (``_pool.py``)."""
    on = engine != IDEAL
    nodes = n_rep * (n_unique + 1) if on and caching else 1
    sg = engine == SGLANG and caching
    leaves = min(capacity, n_unique) + 1
    slots = dup_slots(engine, capacity, answers)
    copies = n_rep * slots
    held = nodes + copies
    return Pool(
        refcnt=node_array("refcnt", held, np.int32, 0),
        # hashless blocks number at most a pool's capacity
        anon_before=node_array("anon_before", held if engine == VLLM else 1, np.int32, 0),
        free_n=np.full(n_rep, capacity, np.int64),
        cached_free=np.zeros(n_rep, np.int64),
        nchild=node_array("nchild", nodes if sg else 1, np.int32, 0),
        stamp=node_array("stamp", nodes if sg else 1, np.int64, 0),
        heap_key=np.zeros(n_rep * leaves if sg else 1, np.int64),
        heap_node=np.zeros(n_rep * leaves if sg else 1, np.int64),
        heap_n=np.zeros(n_rep, np.int64),
        heap_pos=node_array("heap_pos", nodes if sg else 1, np.int64, NONE),
        anon_free=np.full(n_rep, capacity, np.int64),
        rnext=np.empty(n + n_rep if on else 1, np.int64),
        rprev=np.empty(n + n_rep if on else 1, np.int64),
        stamp_ctr=np.zeros(1, np.int64),
        ans_mine=np.zeros(max(answers, 1), np.bool_),
        # one entry past the last, so that an array of one entry means "no copies"
        dup_of=node_array("dup_of", nodes + 1 if slots else 1, np.int32, NONE),
        dup_owner=np.full(copies + 1, NONE, np.int32),
        dup_pos=np.full(copies + 1, NONE, np.int64),
        dup_stack=np.append(np.tile(np.arange(slots, dtype=np.int32), n_rep), np.int32(0)),
        dup_top=np.full(n_rep, slots, np.int64),
        ans_copy=np.full(answers + 1 if slots else 1, NONE, np.int32),
        nstart=node_array("nstart", nodes if sg else 1, np.int8, 1),
        ncont=node_array("ncont", nodes if sg else 1, np.int32, NONE),
    )

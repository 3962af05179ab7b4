"""The compiled fleet loop's records: settings as named tuples (numba compiles a ``NamedTuple``
argument into a struct, so a field is read by name at no cost), and its state as named tuples
of arrays, one record per concern, built here in Python and mutated in place by the loop.

Codes the loop dispatches on (their names live in ``routers.ROUTERS`` and ``run.ENGINES``):
routers ``FIXED .. KV_AWARE``, engines ``IDEAL .. SGLANG``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numba
import numpy as np

from prefixscope.analysis.policies._row_loops import no_ops

#: The decorator of the loop's pieces: compiled without reference counting. A piece takes
#: records of arrays and never allocates; counting every array of every record on each call
#: made the loop about 1,000 times slower (measured on the bundled hour, 1.6 M steps).
piece = numba.njit(_nrt=False)
#: A piece run on every step, inlined where it is called: a call passes each array of each
#: record as separate arguments, which cost the step loop 25 times its time (measured).
step_piece = numba.njit(_nrt=False, inline="always")

FIXED, LEAST_LOADED, CACHE_AWARE, KV_AWARE = 0, 1, 2, 3
IDEAL, VLLM, SGLANG = 0, 1, 2
#: How the ideal engine's caches evict: a linked list (lru, fifo, ttl; pinned, whose pinned
#: blocks stay off it), or a row policy's rows and operations (``policies/rows.py``).
LIST, ROWS, PINNED = 0, 1, 2
NONE = -1
#: The decode heaps' keys: ``step · SEQ_SPAN + schedule sequence``, so entries due at the same
#: step come out in the order their requests were scheduled.
SEQ_SPAN = 2**31
#: The miss budget's parts (``_budget.py``), and a watched block's codes besides them: served
#: from cache, or its request never looked up (the loop stopped before it).
BUDGET_PARTS = 8
HIT, NOT_LOOKED_UP = -1, -2
#: Buckets of the running-blocks histogram (its p95 is exact below this many blocks).
HIST_BUCKETS = 4096


class Workload(NamedTuple):
    """The trace as the loop reads it: CSR blocks (dense ids) and each block's parent, and per
    request its arrival on the scaled clock, input and output tokens and whether a whole-block
    prompt recomputes its last block. A KV pool holds a block a request names twice once, and
    caches a finished request's answer under the ids ``answer_blocks[answer_offsets[q] :
    answer_offsets[q + 1]]`` (CSR; ``structure/answers.py``; pools only)."""

    offsets: np.ndarray
    blocks: np.ndarray
    parent: np.ndarray
    arrival: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    recompute_last: np.ndarray
    repeat: np.ndarray  # per lookup: its block came earlier in the same request (pools only)
    answer_offsets: np.ndarray  # int64
    answer_blocks: np.ndarray  # int32
    #: per request its leading run of cached blocks where its replica's policy was replayed
    #: apart (``replayed.py``); empty: the loop's own caches look it up
    given_hits: np.ndarray  # int32
    #: per request the unbounded cache's leading run (``ceiling``), which the miss budget
    #: (``_budget.py``) reads; empty: no budget is kept
    ceiling_run: np.ndarray  # int32
    #: per block whether every replica pins it (``pinned`` with a ``--pin`` file); empty: none
    pinned: np.ndarray  # bool


class Cost(NamedTuple):
    """The step cost model's terms and knees (``stepcost.StepCost``)."""

    a: float
    b: float
    c: float
    e: float
    f: float
    k1: float
    k2: float


class Sched(NamedTuple):
    """How every replica runs: the step's token budget, the most requests running, the block
    size, the engine (``IDEAL``, ``VLLM``, ``SGLANG``), each replica's capacity in blocks and
    whether a hit refreshes a cached block (``lru``; ``fifo`` does not); ``ttl``: the idle
    seconds after which a cached block is dropped (``ttl``; -1: never); ``policy``: ``LIST``,
    ``ROWS`` or ``PINNED`` (``_policy_cache.py``); ``caching``: False, a pool's
    prefix caching is off (vLLM's ``--no-enable-prefix-caching``, ``_pool.py``); ``coast``:
    False, every step runs through the scheduler's step, none summed apart
    (``_sched.coast``): the reference a coasted run is held to (``tests/test_fleet_coast.py``)."""

    budget: int
    max_seqs: int
    block_size: int
    engine: int
    capacity: int
    recency: bool
    hist_width: int  # blocks per bucket of the running-blocks histogram
    ttl: float = -1.0
    policy: int = LIST
    caching: bool = True
    coast: bool = True


class RouterParams(NamedTuple):
    """The stateful routers' settings (``routers.RouterSettings``; the tree in blocks)."""

    kind: int
    threshold: float
    balance_abs: float
    balance_rel: float
    tree_blocks: int
    evict_interval_s: float
    overlap_weight: float
    load_weight: float
    #: seconds the router's view of the caches lags them (``_stale.py``; 0: it reads them)
    delay_s: float = 0.0


class TierParams(NamedTuple):
    """A DRAM tier per replica (``dram_blocks``, 0: none) and the fleet's store
    (``store_blocks``, -1: none), with the seconds to copy one token from each."""

    dram_blocks: int
    store_blocks: int
    dram_s: float
    store_s: float


class Requests(NamedTuple):
    """Per request. ``gen``: tokens generated so far; ``pheld``: its prompt's positions it holds
    (``vllm`` takes them chunk by chunk); ``anon``: blocks it holds that carry no hash (a
    partial prompt block, generated tokens); ``seq``: its latest schedule's number."""

    replica: np.ndarray
    hit_blocks: np.ndarray
    hit_tok: np.ndarray
    ttft: np.ndarray
    first_start: np.ndarray
    done_at: np.ndarray
    rem: np.ndarray  # prefill tokens still to compute
    ctx: np.ndarray  # positions before the next chunk
    qnext: np.ndarray
    started: np.ndarray
    gen: np.ndarray
    pheld: np.ndarray
    anon: np.ndarray
    dec_start: np.ndarray  # the replica's step count when its decode began
    seq: np.ndarray
    src_tok: np.ndarray  # hit tokens by source (HBM, DRAM, store)
    saved: np.ndarray  # prefill seconds each source saves, transfers paid
    xfer: np.ndarray
    cost_none: np.ndarray  # T(input, 0): the request without any cache
    ans_n: np.ndarray  # answer positions its generated blocks have reached (``_pool.filled``)
    ans_own: np.ndarray  # of those, the ones it holds under the answer's id
    fill: np.ndarray  # its pending block event is a fill (``_sched._push_grow``), not a take
    # its lookups after a preemption (vLLM's ``preempted_*`` counters): how many, the tokens
    # they looked up, the tokens they found
    pre_n: np.ndarray
    pre_q: np.ndarray
    pre_h: np.ndarray
    #: its prompt tokens not served, by where they went (``_budget.py``'s parts; int32, as a
    #: fleet grid keeps every configuration's until its tables are made; one row when no
    #: budget is kept)
    miss: np.ndarray
    #: ``[r, part of its block 0, part of block 1, ...]``: one watched request's blocks by
    #: part (``_budget.HIT`` for a hit, ``NOT_LOOKED_UP`` before its lookup); ``[-1]``: none
    why: np.ndarray
    #: the replica a fresh view would have routed it to, under a stale router view with a
    #: miss budget (the budget's ``STALE``); one entry: not kept
    fresh: np.ndarray


class Replicas(NamedTuple):
    """Per replica: clock and counters, the queue, loads, cache sizes and the time-weighted
    sums of the blocks running requests hold and the prefix cache's size."""

    now: np.ndarray
    busy: np.ndarray
    steps: np.ndarray
    prefill_tok: np.ndarray
    decode_tok: np.ndarray
    qhead: np.ndarray
    qtail: np.ndarray
    n_started: np.ndarray
    outstanding: np.ndarray  # prefill tokens queued (the least-loaded load)
    inflight: np.ndarray  # routed, not finished (the cache-aware load)
    n_dec: np.ndarray
    sum_ctx: np.ndarray  # context of the decoding requests
    size: np.ndarray  # blocks cached (ideal)
    tsize: np.ndarray  # blocks in the router tree (cache-aware)
    dsize: np.ndarray  # blocks in the DRAM tier
    filled_at: np.ndarray
    preemptions: np.ndarray
    footprint: np.ndarray  # blocks the running requests need (ideal: not taken from a pool)
    running_s: np.ndarray  # Σ running blocks × step seconds
    cached_s: np.ndarray  # Σ prefix-cache blocks × step seconds
    hist: np.ndarray  # (replicas, HIST_BUCKETS): step seconds by running blocks
    overlap: np.ndarray  # scratch: each replica's leading run for the request being routed
    score: np.ndarray  # scratch: router scores
    clock: np.ndarray  # [last tree eviction (s), schedule counter, stamp counter, store size]


class Heaps(NamedTuple):
    """Two indexed min-heaps per replica over its running requests (segments of ``max_seqs``):
    decodes by the step they end, decodes by the step they next need a block."""

    done_key: np.ndarray
    done_req: np.ndarray
    done_n: np.ndarray
    done_pos: np.ndarray
    grow_key: np.ndarray
    grow_req: np.ndarray
    grow_n: np.ndarray
    grow_pos: np.ndarray


class Sets(NamedTuple):
    """The block sets: per block ``uint64`` masks of which replicas hold it (``held``: its
    cache, or its KV pool's hashes), and linked lists over nodes ``i·(n_unique + 1) + b``
    (sentinel ``i·(n_unique + 1) + n_unique``): the cache's eviction order (ideal), the router
    trees, the DRAM tiers and the store; ``last``: each node's last use (ttl's idle clock);
    ``ever``: per block, whether a pool ever cached it (the miss budget's evicted or pending;
    one entry: not kept). A stale router view (``_stale.py``; one entry each: none): ``rview``,
    the masks as the router sees them; per replica a ring of changes (``log_t`` when,
    ``log_b`` which block, ``log_on`` cached or dropped; ``log_at[i]``: head, count, applied
    early) and ``log_now[0]``, the time a change now happens at."""

    held: np.ndarray
    nxt: np.ndarray
    prv: np.ndarray
    tree_held: np.ndarray
    tnxt: np.ndarray
    tprv: np.ndarray
    dram_held: np.ndarray
    dnxt: np.ndarray
    dprv: np.ndarray
    store_in: np.ndarray
    snxt: np.ndarray
    sprv: np.ndarray
    last: np.ndarray
    ever: np.ndarray
    rview: np.ndarray
    log_t: np.ndarray
    log_b: np.ndarray
    log_on: np.ndarray
    log_at: np.ndarray
    log_now: np.ndarray
    pnode: np.ndarray  # int32 rows of each replica's row policy (``_policy_cache``)
    porder: np.ndarray  # int32 rows of each replica's own order (LFU's buckets)
    touch: object  # the row policy's operations over a request, as function values
    evict: object  # (``policies/_row_loops.py``)
    pout: np.ndarray  # int32: the blocks they inserted or evicted, one request's at most


class PolicyRows(NamedTuple):
    """A row policy's state for every replica (``RowPolicy.empty``), its operations compiled
    for the loop (``RowPolicy.fleet_ops``) and room for the ids they return (the longest
    request's blocks)."""

    node: np.ndarray
    order: np.ndarray
    touch: object
    evict: object
    out: np.ndarray


class Stop(NamedTuple):
    """When the loop may stop early: once a TTFT target is missed for sure (``run.Stop``).

    Per target ``k``: the limit (s) and the count of measured requests (those from
    ``first[0]`` on) whose TTFT exceeds it that decides a miss; ``count[k]`` so far and
    ``ptr[k]``, the next request not yet judged. ``at[0]``: the request at whose arrival the
    loop stopped (-1: it ran to the end). No target: it never stops."""

    limit: np.ndarray  # float64
    allowed: np.ndarray  # int64
    count: np.ndarray  # int64
    ptr: np.ndarray  # int64
    first: np.ndarray  # int64, [first measured request]
    at: np.ndarray  # int64, [request it stopped at, or -1]


def stop(limits: list[float], allowed: list[int], first: int) -> Stop:
    k = len(limits)
    return Stop(
        np.asarray(limits, np.float64).reshape(k), np.asarray(allowed, np.int64).reshape(k),
        np.zeros(k, np.int64), np.full(k, first, np.int64), np.array([first], np.int64),
        np.array([NONE], np.int64),
    )  # fmt: skip


def requests(
    n: int, budget: bool = False, watch: int = NONE, blocks: int = 0, stale: bool = False
) -> Requests:
    """Every request's state, zero (NONE where a position or a time is unset), by name;
    ``budget``: a miss budget row per request; ``watch``: the request (of ``blocks`` blocks)
    whose blocks' parts are kept; ``stale``: the router's view lags (with ``budget``, each
    request's fresh choice is kept)."""

    def full(dtype: type, fill: int = 0, width: int = 0) -> np.ndarray:
        return np.full((n, width) if width else n, fill, dtype)

    i32, i64, f64 = np.int32, np.int64, np.float64
    return Requests(
        replica=full(i32, NONE), hit_blocks=full(i32), hit_tok=full(i64), ttft=full(f64),
        first_start=full(f64), done_at=full(f64), rem=full(i64), ctx=full(i64),
        qnext=full(i64, NONE), started=full(np.bool_), gen=full(i64), pheld=full(i64),
        anon=full(i64),
        dec_start=full(i64), seq=full(i64, NONE), src_tok=full(i64, width=3),
        saved=full(f64, width=3), xfer=full(f64), cost_none=full(f64), ans_n=full(i32),
        ans_own=full(i32), fill=full(np.bool_), pre_n=full(i64), pre_q=full(i64),
        pre_h=full(i64), miss=np.zeros((n if budget else 1, BUDGET_PARTS), np.int32),
        why=np.array([watch] + [NOT_LOOKED_UP] * (blocks if watch != NONE else 0), i64),
        fresh=np.full(n if budget and stale else 1, NONE, i32),
    )  # fmt: skip


def replicas(n_rep: int, first_arrival: float) -> Replicas:
    """Every replica's state, zero (NONE where a request or a position is unset), by name."""

    def full(dtype: type, fill: int = 0) -> np.ndarray:
        return np.full(n_rep, fill, dtype)

    i64, f64 = np.int64, np.float64
    return Replicas(
        now=full(f64), busy=full(f64), steps=full(i64), prefill_tok=full(i64),
        decode_tok=full(i64), qhead=full(i64, NONE), qtail=full(i64, NONE), n_started=full(i64),
        outstanding=full(f64), inflight=full(f64), n_dec=full(i64), sum_ctx=full(i64),
        size=full(i64), tsize=full(i64), dsize=full(i64), filled_at=full(i64, NONE),
        preemptions=full(i64), footprint=full(i64), running_s=full(f64), cached_s=full(f64),
        hist=np.zeros((n_rep, HIST_BUCKETS), f64), overlap=full(i64), score=full(f64),
        clock=np.array([first_arrival, 0, 0, 0], f64),
    )  # fmt: skip


def heaps(n: int, n_rep: int, max_seqs: int) -> Heaps:
    m = n_rep * max_seqs

    def heap(name: str) -> dict[str, np.ndarray]:
        return {
            f"{name}_key": np.zeros(m, np.int64),
            f"{name}_req": np.zeros(m, np.int64),
            f"{name}_n": np.zeros(n_rep, np.int64),
            f"{name}_pos": np.full(n, NONE, np.int64),
        }

    return Heaps(**heap("done"), **heap("grow"))


#: Node arrays kept between runs of the loop, by thread, then by name (a thread absent: none
#: kept). By thread, since a Dask worker runs tasks on several threads at once and the loop
#: releases the GIL: two runs at once must never share arrays.
_KEPT: dict[int, dict[str, np.ndarray]] = {}


@contextmanager
def kept_nodes(persist: bool = False) -> Iterator[None]:
    """Within the block, the node arrays (``replicas × (n_unique + 1)`` entries each: the lists'
    and the KV pools', :func:`node_array`) are kept between this thread's runs and reused. A
    run touches its nodes page by page; fresh arrays make the system map and zero those pages
    on every run, which cost a many-replica fleet most of its time (5.2 of 6.2 s at 64
    replicas on the ×20 trace). The lists need no clearing: a run reads a node only after
    linking it; the pools' counts are refilled. Released after the block (``persist``: kept
    for the life of the thread, a worker's, until :func:`release_kept`)."""
    me = threading.get_ident()
    outer = _KEPT.get(me)
    if outer is None:
        _KEPT[me] = {}
    try:
        yield
    finally:
        if outer is None and not persist:
            _KEPT.pop(me, None)


def release_kept() -> None:
    """Let every thread's kept node arrays go (a long-lived worker, once its stage is done)."""
    _KEPT.clear()


def kept_arrays() -> dict[str, np.ndarray] | None:
    """This thread's kept node arrays, by name (None: none are kept)."""
    return _KEPT.get(threading.get_ident())


def node_array(name: str, size: int, dtype: type = np.int32, fill: int | None = None) -> np.ndarray:
    """A node array of ``size`` entries of ``dtype`` (kept, inside ``kept_nodes``):
    uninitialised, or every entry ``fill``. Refilling a kept array rewrites pages already
    mapped, where a fresh one has the system map and zero them as the run first touches them;
    outside ``kept_nodes`` a zero fill is ``np.zeros``, whose pages are mapped only where a
    run touches them."""
    kept_here = kept_arrays()
    if kept_here is None or size <= 1:
        if fill is None:
            return np.empty(size, dtype)
        return np.zeros(size, dtype) if fill == 0 else np.full(size, fill, dtype)
    kept = kept_here.get(name)
    if kept is None or kept.size < size or kept.dtype != dtype:
        kept_here.pop(name, None)  # let the smaller one go before the larger is made
        kept = kept_here[name] = np.empty(size, dtype)
    out = kept[:size]
    if fill is not None:
        out.fill(fill)
    return out


def sets(
    n_unique: int,
    n_rep: int,
    tree: bool,
    dram: bool,
    store: bool,
    copies: int = 0,
    idle: bool = False,
    ever: bool = False,
    log_capacity: int = 0,
    policy_rows: PolicyRows | None = None,
    linked: bool = True,
) -> Sets:
    """``copies``: nodes past the replicas' own in the first list (vllm's second copies,
    :func:`dup_slots` per replica); ``idle``: a last-use time per node (``ttl``); ``ever``:
    whether each block was ever cached (a pool's miss budget); ``log_capacity``: changes each
    replica's ring of a stale router view holds (0: the router reads the caches);
    ``policy_rows``: each replica's rows of a row policy (``_policy_cache.py``); a cache kept in
    rows keeps no list (one entry each), 8 bytes a block a replica less; so does a pool with
    prefix caching off (``linked`` False): all its free blocks are hashless, a count."""
    nodes = n_rep * (n_unique + 1)

    def lists(
        on: bool, held: str, name: str, extra: int = 0, links: bool = True
    ) -> dict[str, np.ndarray]:
        """A list's replica masks (field ``held``) and links (``{name}nxt``, ``{name}prv``)."""
        linked = on and links
        return {
            held: np.zeros(n_unique if on else 1, np.uint64),
            f"{name}nxt": node_array(f"{name}nxt", nodes + extra if linked else 1),
            f"{name}prv": node_array(f"{name}prv", nodes + extra if linked else 1),
        }

    s = n_unique + 1 if store else 1
    ring = n_rep * log_capacity if log_capacity else 1
    rows_kept = policy_rows is not None
    if policy_rows is None:  # typed as a row policy's, never called
        policy_rows = PolicyRows(
            np.zeros((1, 4), np.int32), np.zeros((1, 2), np.int32), *no_ops(),
            np.zeros(1, np.int32),
        )
    return Sets(
        **lists(True, "held", "", n_rep * copies, links=not rows_kept and linked),
        **lists(tree, "tree_held", "t"),
        **lists(dram, "dram_held", "d"),
        store_in=np.zeros(n_unique if store else 1, np.bool_),
        snxt=node_array("snxt", s), sprv=node_array("sprv", s),
        last=np.zeros(nodes if idle else 1, np.float64),
        ever=np.zeros(n_unique if ever else 1, np.uint8),
        rview=np.zeros(max(n_unique, 2) if log_capacity else 1, np.uint64),
        log_t=np.zeros(ring, np.float64), log_b=np.zeros(ring, np.int32),
        log_on=np.zeros(ring, np.bool_), log_at=np.zeros((n_rep, 3), np.int64),
        log_now=np.zeros(1, np.float64), pnode=policy_rows.node, porder=policy_rows.order,
        touch=policy_rows.touch, evict=policy_rows.evict, pout=policy_rows.out,
    )  # fmt: skip

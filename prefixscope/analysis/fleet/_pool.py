"""One KV pool per replica, shared by the running requests and the prefix cache, as the
``vllm`` and ``sglang`` engines run it (docs/fleet.md, "Engines", has the sources).

A pool holds ``capacity`` blocks. A block a running request holds is *locked* (``refcnt`` > 0;
a block shared by two requests is held once); a free block either keeps its hash (it is in the
prefix cache and a later request can hit it) or has none. Prompt blocks carry the trace's
hashes; a partial last prompt block and the generated tokens' blocks have none, so they are
freed like the others but never hit, except the full generated blocks of a finished request
whose next turn sends its answer back: they join the cache under that turn's ids
(``structure/answers.py``), as the engines cache generated blocks. When a request takes its
blocks is ``_admit.py``'s. What differs between the engines here is only which free block an
allocation takes (:func:`take`) and where a released block goes (:func:`release`):

- ``vllm`` (``vllm/v1/core/block_pool.py``): one free queue, least recently freed at the head.
  A finished request's blocks are appended tail block first, so its deepest block leaves
  first, and its hashless blocks go to the head (``free_blocks``: ``prepend_n``, "LIFO reuse
  of non-cached blocks"), so they are the next taken; allocation pops the head, evicting that
  block's hash; a hit on a free block takes it out of the queue. The queue's hashless blocks
  are counts, ``anon_before[v]`` just before node ``v`` (the sentinel's count: after the last
  node), so a hashless block costs no node.
- ``sglang`` (``python/sglang/srt/mem_cache/radix_cache.py``): hashless free blocks are used
  first; then the radix cache evicts the unlocked leaf (a cached block no cached block
  extends) released longest ago, with the rest of its radix node; the node's parent may
  become such a leaf. The cache stays prefix-closed, since a request locks its whole chain.

Radix nodes (``sglang``): SGLang's tree keeps runs of pages as one node and ``evict`` frees a
leaf node whole, even where one page would do (0.5.23). A node is the blocks one insert
added under one parent: a request's new prompt blocks at admission, each chunk of a prompt
computed part-way (SGLang's ``checkpoint`` inserts what is computed after each chunk), the
answer a finished request adds. A lookup that ends inside a node splits it there
(``_match_prefix_helper``), and so does the end of a prompt whose request finishes with an
answer (``split_prompt``) or a chunk. ``nstart[v]``: node ``v`` begins its radix node;
``ncont[v]``: the next block of its node (NONE: ``v`` ends it). Blocks inside a node have
one cached child each and are locked alike.

Second copies (``vllm``): an id cached twice, as vLLM caches it (``_copies.py``).

Host memory (``sglang`` with a DRAM tier, SGLang's HiCache): ``dram_held`` marks the blocks
written there (``_tiers.write_host``); of them, those the GPU no longer caches are the DRAM
list, in the order the GPU evicted them (:func:`_to_host`, :func:`_on_gpu`).

Prefix caching off (``Sched.caching`` False, vLLM's ``--no-enable-prefix-caching``): a
request's every position takes a hashless block and gives it back as one, so a pool is only
its count ``free_n``, with no node per block; a preempted request recomputes all it had,
as vLLM does with nothing cached.

Invariant: ``free_n[i] + (blocks locked on replica i) == capacity``; ``cached_free[i]`` of the
free blocks keep a hash.
"""

from __future__ import annotations

from prefixscope.analysis.fleet import _heap
from prefixscope.analysis.fleet._copies import _copy, _drop_copy
from prefixscope.analysis.fleet._records import NONE, SGLANG, piece
from prefixscope.analysis.fleet._sets import _bit, _push_back, _unlink
from prefixscope.analysis.fleet._stale import note


@piece
def _evict(i, v, base, bit, sets, pool, rep, r):  # type: ignore[no-untyped-def]
    """Node ``v``'s block loses its hash (a free block reused)."""
    sets.held[v - base] &= ~bit
    note(sets, i, v - base, False)
    pool.cached_free[i] -= 1
    if rep.filled_at[i] == NONE:
        rep.filled_at[i] = r


@piece
def _to_host(i, v, base, stride, sets):  # type: ignore[no-untyped-def]
    """sglang with a DRAM tier (HiCache): node ``v``, evicted from the GPU, stays in host
    memory if it was written there, and joins the back of what host memory may evict."""
    if sets.dram_held.size > 1 and sets.dram_held[v - base] & _bit(i):
        _push_back(sets.dnxt, sets.dprv, base + stride - 1, v)


@piece
def _on_gpu(i, b, base, sets):  # type: ignore[no-untyped-def]
    """sglang with a DRAM tier: block ``b`` is cached on the GPU again (computed, loaded, or an
    answer cached); a copy host memory holds is no longer one it may evict."""
    if sets.dram_held.size > 1 and sets.dram_held[b] & _bit(i):
        _unlink(sets.dnxt, sets.dprv, base + b)


@piece
def take(i, r, stride, sched, parent, sets, pool, rep):  # type: ignore[no-untyped-def]
    """One free block for request ``r`` (there is one: the caller checked ``free_n``)."""
    pool.free_n[i] -= 1
    if not sched.caching:
        return
    base = i * stride
    bit = _bit(i)
    if sched.engine == SGLANG:
        if pool.anon_free[i] > 0:
            pool.anon_free[i] -= 1
            return
        hb = i * (pool.heap_key.size // rep.now.size)
        v = pool.heap_node[hb]
        _heap.remove(pool.heap_key, pool.heap_node, pool.heap_pos, pool.heap_n, i, hb, v)
        _evict(i, v, base, bit, sets, pool, rep, r)
        _to_host(i, v, base, stride, sets)
        p = parent[v - base]
        # the rest of v's radix node goes too: its blocks are free, hashless
        while pool.nstart[v] == 0 and p >= 0 and sets.held[p] & bit and pool.refcnt[base + p] == 0:
            v = base + p
            pool.nchild[v] -= 1
            pool.ncont[v] = NONE
            _evict(i, v, base, bit, sets, pool, rep, r)
            _to_host(i, v, base, stride, sets)
            pool.anon_free[i] += 1
            p = parent[p]
        if p >= 0 and sets.held[p] & bit:
            pv = base + p
            pool.nchild[pv] -= 1
            if pool.ncont[pv] == v:
                pool.ncont[pv] = NONE
            if pool.nchild[pv] == 0 and pool.refcnt[pv] == 0:
                _leaf(i, pv, hb, pool)
        return
    s = base + stride - 1
    v = sets.nxt[s]
    if pool.anon_before[v] > 0:  # a hashless block (at the sentinel: the queue holds only such)
        pool.anon_before[v] -= 1
        return
    _unlink(sets.nxt, sets.prv, v)
    first = rep.now.size * stride  # the copies' nodes
    if pool.dup_owner.size > 1 and (v >= first or pool.dup_of[v] != NONE):
        _drop_copy(i, v, first, sets, pool)
        pool.cached_free[i] -= 1
        if rep.filled_at[i] == NONE:
            rep.filled_at[i] = r
        return
    _evict(i, v, base, bit, sets, pool, rep, r)


@piece
def _split(u, pool):  # type: ignore[no-untyped-def]
    """sglang: a lookup or an insert ends at node ``u``: the radix node holding it is split
    just after it, so the block after ``u`` in its node begins a node of its own."""
    c = pool.ncont[u]
    if c != NONE:
        pool.nstart[c] = 1
        pool.ncont[u] = NONE


@piece
def _joins(v, prev, pool):  # type: ignore[no-untyped-def]
    """sglang: node ``v``, just cached, continues the radix node of ``prev`` (the block before
    it, cached by the same insert) or, with ``prev`` NONE, begins one."""
    pool.nstart[v] = prev == NONE
    pool.ncont[v] = NONE
    if prev != NONE:
        pool.ncont[prev] = v


@piece
def checkpoint(i, q, tr, stride, sched, req, pool):  # type: ignore[no-untyped-def]
    """sglang: a prompt computed part-way is inserted up to its last whole block after each
    chunk (SGLang's ``checkpoint``): a radix node ends there."""
    start, end = tr.offsets[q], tr.offsets[q + 1]
    j = req.ctx[q] // sched.block_size
    if 0 < j < end - start and sched.caching:
        _split(i * stride + tr.blocks[start + j - 1], pool)


@piece
def _leaf(i, v, hb, pool):  # type: ignore[no-untyped-def]
    """Node ``v`` is an unlocked leaf: evictable, ordered by the release that unlocked it."""
    key = pool.stamp[v] * pool.refcnt.size + v
    _heap.push(pool.heap_key, pool.heap_node, pool.heap_pos, pool.heap_n, i, hb, key, v)


@piece
def _child_added(i, v, pool):  # type: ignore[no-untyped-def]
    """sglang: cached node ``v`` gains a cached child, so it is no longer a leaf; a free one
    leaves the evictable leaves (one its request holds is not among them)."""
    pool.nchild[v] += 1
    hb = i * (pool.heap_key.size // pool.free_n.size)
    _heap.remove(pool.heap_key, pool.heap_node, pool.heap_pos, pool.heap_n, i, hb, v)


@piece
def lock(i, v, stride, sched, sets, pool, n_rep):  # type: ignore[no-untyped-def]
    """A request takes cached block ``v`` (a hit, or a block another request holds)."""
    if pool.refcnt[v] == 0:
        pool.free_n[i] -= 1
        pool.cached_free[i] -= 1
        if sched.engine == SGLANG:
            hb = i * (pool.heap_key.size // n_rep)
            _heap.remove(pool.heap_key, pool.heap_node, pool.heap_pos, pool.heap_n, i, hb, v)
        else:  # out of the free queue; the hashless blocks before it stay where they were
            nx = sets.nxt[v]
            pool.anon_before[nx] += pool.anon_before[v]
            pool.anon_before[v] = 0
            _unlink(sets.nxt, sets.prv, v)
    pool.refcnt[v] += 1


@piece
def register(i, b, stride, sched, parent, sets, pool):  # type: ignore[no-untyped-def]
    """A block just taken gets hash ``b``, locked by the request computing it."""
    base = i * stride
    v = base + b
    sets.held[b] |= _bit(i)
    note(sets, i, b, True)
    if sets.ever.size > 1:
        sets.ever[b] = 1
    pool.refcnt[v] = 1
    if sched.engine == SGLANG:
        _on_gpu(i, b, base, sets)
        pool.nchild[v] = 0
        p = parent[b]
        if p >= 0 and sets.held[p] & _bit(i):
            _child_added(i, base + p, pool)


@piece
def filled(i, q, tr, stride, sched, sets, pool, req):  # type: ignore[no-untyped-def]
    """``vllm``: decoding request ``q`` computes the last token of the block it holds last in
    this step, and vLLM caches it (``vllm/v1/request.py`` hashes blocks as tokens are
    appended; ``allocate_slots`` in ``kv_cache_manager.py`` caches the full ones up to the
    step's tokens): if it is the next of its answer's positions, it takes that id, visible to
    the requests scheduled after it; an id whose parent this replica does not hold stays
    hashless here, and one it holds already is a second copy (the module docstring)."""
    j = req.anon[q] + req.ans_own[q] - 1
    a0 = tr.answer_offsets[q]
    if j < 0 or j != req.ans_n[q] or a0 + j >= tr.answer_offsets[q + 1]:
        return
    req.ans_n[q] += 1
    b = tr.answer_blocks[a0 + j]
    par = tr.parent[b]
    bit = _bit(i)
    if par >= 0 and not sets.held[par] & bit:
        return
    if sets.held[b] & bit:
        if not _copy(i, i * stride + b, a0 + j, stride, pool):
            return
    else:
        register(i, b, stride, sched, tr.parent, sets, pool)
    pool.ans_mine[a0 + j] = True
    req.anon[q] -= 1
    req.ans_own[q] += 1


@piece
def _cache_free(i, v, s, sets, pool, sg, n_rep):  # type: ignore[no-untyped-def]
    """Node ``v``, unlocked, joins the prefix cache: the queue's tail (vllm; the hashless
    blocks freed before it now precede it) or the evictable leaves (sglang)."""
    if sg:
        pool.stamp[v] = pool.stamp_ctr[0]
        if pool.nchild[v] == 0:
            _leaf(i, v, i * (pool.heap_key.size // n_rep), pool)
    else:
        pool.anon_before[v] = pool.anon_before[s]
        pool.anon_before[s] = 0
        _push_back(sets.nxt, sets.prv, s, v)


@piece
def release(i, q, full, done, tr, stride, sched, sets, pool, req, n_rep):  # type: ignore[no-untyped-def]
    """Request ``q`` frees its blocks, deepest first: its generated-side blocks (the tail past
    its prompt's blocks), then those of its prompt it holds; a block no running request holds
    any more joins the prefix cache. Of the tail, the first ``full`` are full of computed
    tokens, which the engines cache (vLLM hashes them, SGLang inserts them): those it holds
    under its answer's ids (:func:`filled`, and a readmission's) and, once it is ``done``, the
    answer positions not reached yet (``structure/answers.py``) are cached under those ids, so
    the next turn hits them; the others stay cached but nothing here can hit them. Under
    ``vllm`` the cached ones go to the queue's tail, deepest first, and the rest to its head
    (vLLM's "LIFO reuse" of blocks that never match): taken first."""
    if not sched.caching:  # every block hashless: counted back, in no order that matters
        pool.free_n[i] += req.pheld[q] + req.anon[q] + req.ans_own[q]
        req.ans_n[q] = 0
        req.ans_own[q] = 0
        return
    base = i * stride
    s = base + stride - 1
    sg = sched.engine == SGLANG
    bit = _bit(i)
    a0, a1 = tr.answer_offsets[q], tr.answer_offsets[q + 1]
    reached = req.ans_n[q]
    tail = req.anon[q] + req.ans_own[q]
    copies = pool.dup_owner.size > 1
    # the answer's ids not reached yet that this replica does not hold, parents first (each
    # one's parent is the block before it, or the prompt's last, which the request still
    # holds): marked -1 until they are freed below
    n_new = 0
    if sg and done and full > 0 and tr.offsets[q + 1] > tr.offsets[q]:
        _split(base + tr.blocks[tr.offsets[q + 1] - 1], pool)  # SGLang's split_prompt
    if done:
        prev = NONE
        for j in range(reached, min(full, a1 - a0)):
            b = tr.answer_blocks[a0 + j]
            par = tr.parent[b]
            if sets.held[b] & bit or (par >= 0 and not sets.held[par] & bit):
                prev = NONE
                continue
            sets.held[b] |= bit
            note(sets, i, b, True)
            if sets.ever.size > 1:
                sets.ever[b] = 1
            pool.refcnt[base + b] = -1
            n_new += 1
            if sg:
                _on_gpu(i, b, base, sets)
                pool.nchild[base + b] = 0
                if par >= 0:
                    _child_added(i, base + par, pool)
                _joins(base + b, prev if prev != NONE and base + par == prev else NONE, pool)
                prev = base + b
    pool.cached_free[i] += n_new
    pool.stamp_ctr[0] += 1
    hashless = 0
    for j in range(tail - 1, -1, -1):
        v = base + tr.answer_blocks[a0 + j] if a0 + j < a1 else -1
        if j < reached and pool.ans_mine[a0 + j] and copies and pool.ans_copy[a0 + j] != NONE:
            w = pool.ans_copy[a0 + j]
            pool.ans_copy[a0 + j] = NONE
            pool.ans_mine[a0 + j] = False
            pool.dup_pos[w - pool.free_n.size * stride] = NONE
            pool.refcnt[w] = 0
            pool.free_n[i] += 1
            pool.cached_free[i] += 1
            _cache_free(i, w, s, sets, pool, sg, n_rep)
        elif j < reached and pool.ans_mine[a0 + j]:
            pool.ans_mine[a0 + j] = False
            pool.refcnt[v] -= 1
            if pool.refcnt[v] == 0:  # else another running request holds it too
                pool.free_n[i] += 1
                pool.cached_free[i] += 1
                _cache_free(i, v, s, sets, pool, sg, n_rep)
        elif j >= reached and v >= 0 and pool.refcnt[v] == -1:
            pool.refcnt[v] = 0
            pool.free_n[i] += 1
            _cache_free(i, v, s, sets, pool, sg, n_rep)
        else:
            pool.free_n[i] += 1
            hashless += 1
            if not sg and j < full:
                pool.anon_before[s] += 1
            elif not sg:
                pool.anon_before[sets.nxt[s]] += 1
    if sg:
        pool.anon_free[i] += hashless
    req.ans_n[q] = 0
    req.ans_own[q] = 0
    for p in range(tr.offsets[q] + req.pheld[q] - 1, tr.offsets[q] - 1, -1):
        if tr.repeat[p]:
            continue
        v = base + tr.blocks[p]
        pool.refcnt[v] -= 1
        if pool.refcnt[v] > 0:
            continue
        pool.free_n[i] += 1
        pool.cached_free[i] += 1
        _cache_free(i, v, s, sets, pool, sg, n_rep)

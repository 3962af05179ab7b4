"""One KV pool per replica, shared by the running requests and the prefix cache, as the
``vllm`` and ``sglang`` engines run it (docs/fleet.md, "Engines", has the sources).

A pool holds ``capacity`` blocks. A block a running request holds is *locked* (``refcnt`` > 0;
a block shared by two requests is held once); a free block either keeps its hash (it is in the
prefix cache and a later request can hit it) or has none. Prompt blocks carry the trace's
hashes; a partial last prompt block and the generated tokens' blocks have none, so they are
freed like the others but never hit. What differs between the engines is only which free
block an allocation takes (:func:`take`) and where a released block goes (:func:`release`):

- ``vllm`` (``vllm/v1/core/block_pool.py``): one free queue, least recently freed at the head.
  A finished request's blocks are appended tail block first, so its deepest block leaves
  first, and its hashless blocks go to the head (``free_blocks``: ``prepend_n``, "LIFO reuse
  of non-cached blocks"), so they are the next taken; allocation pops the head, evicting that
  block's hash; a hit on a free block takes it out of the queue. The queue's hashless blocks
  are counts, ``anon_before[v]`` just before node ``v`` (the sentinel's count: after the last
  node), so a hashless block costs no node.
- ``sglang`` (``python/sglang/srt/mem_cache/radix_cache.py``): hashless free blocks are used
  first; then the radix cache evicts the unlocked leaf (a cached block no cached block
  extends) released longest ago; its parent may become such a leaf. The cache stays
  prefix-closed, since a request locks its whole chain.

Invariant: ``free_n[i] + (blocks locked on replica i) == capacity``; ``cached_free[i]`` of the
free blocks keep a hash.
"""

from __future__ import annotations

from prefixscope.analysis.fleet import _heap
from prefixscope.analysis.fleet._cache import prefill_alone, served
from prefixscope.analysis.fleet._records import NONE, SGLANG, piece
from prefixscope.analysis.fleet._sets import _bit, _push_back, _unlink


@piece
def _evict(i, v, base, bit, sets, pool, rep, r):  # type: ignore[no-untyped-def]
    """Node ``v``'s block loses its hash (a free block reused)."""
    sets.held[v - base] &= ~bit
    pool.cached_free[i] -= 1
    if rep.filled_at[i] == NONE:
        rep.filled_at[i] = r


@piece
def take(i, r, stride, sched, parent, sets, pool, rep):  # type: ignore[no-untyped-def]
    """One free block for request ``r`` (there is one: the caller checked ``free_n``)."""
    base = i * stride
    bit = _bit(i)
    pool.free_n[i] -= 1
    if sched.engine == SGLANG:
        if pool.anon_free[i] > 0:
            pool.anon_free[i] -= 1
            return
        hb = i * (pool.heap_key.size // rep.now.size)
        v = pool.heap_node[hb]
        _heap.remove(pool.heap_key, pool.heap_node, pool.heap_pos, pool.heap_n, i, hb, v)
        _evict(i, v, base, bit, sets, pool, rep, r)
        p = parent[v - base]
        if p >= 0 and sets.held[p] & bit:
            pv = base + p
            pool.nchild[pv] -= 1
            if pool.nchild[pv] == 0 and pool.refcnt[pv] == 0:
                _leaf(i, pv, hb, pool)
        return
    s = base + stride - 1
    v = sets.nxt[s]
    if pool.anon_before[v] > 0:  # a hashless block (at the sentinel: the queue holds only such)
        pool.anon_before[v] -= 1
        return
    _unlink(sets.nxt, sets.prv, v)
    _evict(i, v, base, bit, sets, pool, rep, r)


@piece
def _leaf(i, v, hb, pool):  # type: ignore[no-untyped-def]
    """Node ``v`` is an unlocked leaf: evictable, ordered by the release that unlocked it."""
    key = pool.stamp[v] * pool.refcnt.size + v
    _heap.push(pool.heap_key, pool.heap_node, pool.heap_pos, pool.heap_n, i, hb, key, v)


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
    pool.refcnt[v] = 1
    if sched.engine == SGLANG:
        pool.nchild[v] = 0
        p = parent[b]
        if p >= 0 and sets.held[p] & _bit(i):
            pool.nchild[base + p] += 1


@piece
def release(i, anon, full, blocks, repeat, start, end, stride, sched, sets, pool, n_rep):  # type: ignore[no-untyped-def]
    """A request frees its blocks: its ``anon`` blocks without a trace hash (its tail), then
    its prompt's from the deepest; a block no running request holds any more joins the prefix
    cache. Under ``vllm`` the ``full`` of the tail vLLM hashes (full blocks of computed
    generated tokens) go to the queue's tail first, as cached blocks nothing here hits, and
    the rest to its head (vLLM's "LIFO reuse" of blocks that never match): taken first."""
    base = i * stride
    s = base + stride - 1
    sg = sched.engine == SGLANG
    pool.free_n[i] += anon
    if sg:
        pool.anon_free[i] += anon
    else:
        pool.anon_before[s] += full
        pool.anon_before[sets.nxt[s]] += anon - full
    pool.stamp_ctr[0] += 1
    for p in range(end - 1, start - 1, -1):
        if repeat[p]:
            continue
        v = base + blocks[p]
        pool.refcnt[v] -= 1
        if pool.refcnt[v] > 0:
            continue
        pool.free_n[i] += 1
        pool.cached_free[i] += 1
        if sg:
            pool.stamp[v] = pool.stamp_ctr[0]
            if pool.nchild[v] == 0:
                _leaf(i, v, i * (pool.heap_key.size // n_rep), pool)
        else:  # to the tail; the hashless blocks freed before it now precede it
            pool.anon_before[v] = pool.anon_before[s]
            pool.anon_before[s] = 0
            _push_back(sets.nxt, sets.prv, s, v)


@piece
def admit(q, i, tr, cost, sched, stride, sets, pool, req, rep):  # type: ignore[no-untyped-def]
    """Schedule request ``q`` on replica ``i`` if its blocks fit: look up its prompt's
    leading run, lock the cached blocks, take new ones for the rest (the new hashes are
    visible at once) and for its hashless tail. ``False``, nothing changed, when the free
    blocks (cached ones it hits count against them) fall short, as vLLM's
    ``allocate_slots`` refuses. Its hit is its first admission's lookup, as vLLM's metric
    counts it (``v1/metrics/stats.py``; a lookup after a preemption is not a query there)."""
    start, end = tr.offsets[q], tr.offsets[q + 1]
    nb = end - start
    bs = sched.block_size
    base = i * stride
    bit = _bit(i)
    inp = tr.input_tokens[q]
    length = inp + req.gen[q]  # a preempted request recomputes its generated tokens too
    k = 0
    while start + k < end and sets.held[tr.blocks[start + k]] & bit:
        k += 1
    total = max(nb, (length + bs - 1) // bs)
    need = total - nb
    for p in range(start, end):
        b = tr.blocks[p]
        if not tr.repeat[p] and (not sets.held[b] & bit or pool.refcnt[base + b] == 0):
            need += 1
    if need > pool.free_n[i]:
        return False
    for p in range(start, end):  # cached blocks first, so taking new ones cannot evict them
        b = tr.blocks[p]
        if sets.held[b] & bit and not tr.repeat[p]:
            lock(i, base + b, stride, sched, sets, pool, rep.now.size)
    for p in range(start, end):  # parents before children
        b = tr.blocks[p]
        if not sets.held[b] & bit:
            take(i, q, stride, sched, tr.parent, sets, pool, rep)
            register(i, b, stride, sched, tr.parent, sets, pool)
    for _ in range(total - nb):
        take(i, q, stride, sched, tr.parent, sets, pool, rep)
    req.anon[q] = total - nb
    if req.gen[q] == 0:
        hit = min(served(k, nb, tr.recompute_last[q]) * bs, inp)
        new = max(inp - hit, 1)
        if req.seq[q] == NONE:  # vLLM's hit metric counts a request's first admission alone
            req.hit_blocks[q] = k
            req.hit_tok[q] = hit
            req.src_tok[q, 0] = hit
            req.cost_none[q] = prefill_alone(cost, inp, 0, bs)
            req.saved[q, 0] = req.cost_none[q] - prefill_alone(
                cost, inp, served(k, nb, tr.recompute_last[q]), bs
            )
    else:
        new = length - min(k * bs, inp)
    rep.outstanding[i] += new - req.rem[q]
    req.rem[q] = new
    req.ctx[q] = max(length - new, 0)
    return True

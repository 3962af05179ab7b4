"""The lower tiers' updates for the fleet loop (``_kernel.py``).

- ``hbm_over_dram``: a replica's HBM with a DRAM tier below it, exclusive (a block is in one
  of them at most). The request's blocks go to HBM, deepest first (a DRAM block moves up);
  HBM's evictions, front first, go to the back of DRAM; DRAM's evictions leave. Under LRU the
  two lists are then one LRU stack of ``capacity + dram_cap`` blocks, cut after ``capacity``.
- ``store_write``: the fleet's one store. What the request computed is written to it (a
  block computed anywhere); what the store served is used again (refreshed under LRU); what HBM
  or DRAM served is not touched.
- ``write_through``: a KV pool's tiers (``vllm``), inclusive: a prompt is written to its
  replica's DRAM tier and to the store once computed, whatever else holds it.
- ``write_host``: the ``sglang`` pool's host memory and store (HiCache): a computed prompt is
  written to host memory, which evicts only what the GPU has evicted, and from there to the
  store.
"""

from __future__ import annotations

import numba

from prefixscope.analysis.fleet._sets import UNPINNED, _bit, _evict_to, _push_back, _touch, _unlink
from prefixscope.analysis.fleet._stale import note


@numba.njit(inline="always")
def hbm_over_dram(  # type: ignore[no-untyped-def]
    blocks, start, end, i, base, s, capacity, dram_cap, size, dsize, recency,
    held, nxt, prv, dram_held, dnxt, dprv, sets,
):  # fmt: skip
    bit = _bit(i)
    for p in range(end - 1, start - 1, -1):
        b = blocks[p]
        v = base + b
        if held[b] & bit:
            if recency:
                _unlink(nxt, prv, v)
                _push_back(nxt, prv, s, v)
            continue
        if dram_held[b] & bit:
            _unlink(dnxt, dprv, v)
            dram_held[b] &= ~bit
            dsize -= 1
        held[b] |= bit
        note(sets, i, b, True)
        size += 1
        _push_back(nxt, prv, s, v)
    while size > capacity:
        v = nxt[s]
        _unlink(nxt, prv, v)
        held[v - base] &= ~bit
        note(sets, i, v - base, False)
        size -= 1
        dram_held[v - base] |= bit
        _push_back(dnxt, dprv, s, v)
        dsize += 1
    dsize = _evict_to(i, base, s, dram_cap, dsize, dram_held, dnxt, dprv)
    return size, dsize


@numba.njit(inline="always")
def store_write(  # type: ignore[no-untyped-def]
    blocks, start, end, served, source, store_cap, ssize, recency, store_in, snxt, sprv
):
    """``served``: the request's served leading run; ``source[j]``: the tier of its block j
    (2: the store). Returns the store's size."""
    su = store_in.size  # the sentinel
    for p in range(end - 1, start - 1, -1):
        j = p - start
        b = blocks[p]
        if j < served and source[j] != 2:
            continue
        if store_in[b]:
            if recency:
                _unlink(snxt, sprv, b)
                _push_back(snxt, sprv, su, b)
        else:
            store_in[b] = True
            ssize += 1
            _push_back(snxt, sprv, su, b)
    while ssize > store_cap and snxt[su] != su:
        v = snxt[su]
        _unlink(snxt, sprv, v)
        store_in[v] = False
        ssize -= 1
    return ssize


@numba.njit(inline="always")
def write_through(blocks, start, end, i, stride, tiers, sets, rep):  # type: ignore[no-untyped-def]
    """A KV pool's tiers (``vllm``): a prompt just computed is offered to replica ``i``'s DRAM
    tier and to the store, each an LRU list that the blocks it holds already move to the back
    of and the others join, deepest first, evicting from the front. vLLM's CPU offloading
    stores every full block a step computes and counts a block it holds already as a reuse
    (``prepare_store`` in ``vllm/v1/kv_offload/cpu/manager.py``, LRU by default), as LMCache
    writes every chunk to its backends."""
    if tiers.dram_blocks > 0:
        base = i * stride
        s = base + stride - 1
        rep.dsize[i] += _touch(
            blocks, start, end, i, base, s, sets.dram_held, sets.dnxt, sets.dprv, True, UNPINNED
        )
        rep.dsize[i] = _evict_to(
            i, base, s, tiers.dram_blocks, rep.dsize[i], sets.dram_held, sets.dnxt, sets.dprv
        )
    store_after(blocks, start, end, 0, blocks, True, tiers, sets, rep)


@numba.njit(inline="always")
def store_after(blocks, start, end, served, source, recency, tiers, sets, rep):  # type: ignore[no-untyped-def]
    """The fleet's store, where there is one, after a request (:func:`store_write`): the
    ``ideal`` caches' (their served run and its tiers) and a pool's (served 0: every block
    written or refreshed)."""
    if tiers.store_blocks >= 0:
        rep.clock[3] = store_write(
            blocks, start, end, served, source, tiers.store_blocks, int(rep.clock[3]), recency,
            sets.store_in, sets.snxt, sets.sprv,
        )  # fmt: skip


@numba.njit(inline="always")
def write_host(blocks, start, end, i, stride, tiers, sets, rep):  # type: ignore[no-untyped-def]
    """The ``sglang`` pool's tiers, as SGLang's HiCache runs them with its default
    ``write_through`` policy (``python/sglang/srt/mem_cache/hiradix_cache.py``,
    sgl-project/sglang at 263bc85): a prompt just computed is written to replica ``i``'s host
    memory, parents first (``insert`` counts a hit on each node, and the first writes it:
    ``_inc_hit_count``, ``write_backup``). A block host memory holds already is not written
    again. When it is full it evicts, to make room, blocks the GPU has evicted, the one
    evicted longest ago first (``evict_host`` takes only evicted nodes, leaves first); when
    none is left, this block and the rest of the prompt are not written. What was written
    goes on to the store (``write_backup_storage`` follows each host write), deepest first."""
    base = i * stride
    s = base + stride - 1
    bit = _bit(i)
    cap = tiers.dram_blocks
    stop = start
    for p in range(start, end):
        b = blocks[p]
        if not sets.dram_held[b] & bit:
            rep.dsize[i] = _evict_to(
                i, base, s, cap - 1, rep.dsize[i], sets.dram_held, sets.dnxt, sets.dprv
            )
            if rep.dsize[i] >= cap:  # full of blocks the GPU holds
                break
            sets.dram_held[b] |= bit
            rep.dsize[i] += 1
        stop = p + 1
    store_after(blocks, start, stop, 0, blocks, True, tiers, sets, rep)

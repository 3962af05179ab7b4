"""A hash-id trace through SGLang's own ``RadixCache``: the referee of ``fleet --engine sglang``
one request at a time (``benchmarks/engine_conformance.py --sglang-python``; docs/fleet.md).

Runs in a scratch environment with SGLang installed (``make peers-sglang``), never in the
project's: no model, no GPU. The KV slots are a pool of ``--blocks`` pages of ``BLOCK`` tokens
handed out whole, as SGLang's paged allocator does; the cache is SGLang's ``RadixCache`` at that
page size, LRU. Each request, alone, goes the way SGLang's scheduler takes it:

- its prompt but the last token (``Req.adjust_max_prefix_ids``: at least one token is computed)
  is matched (``match_prefix``: whole pages), and the matched node locked (``inc_lock_ref``);
- the rest is computed a chunk (``--chunk`` tokens, SGLang's ``chunked_prefill_size``) at a
  time, each chunk's pages allocated as it is scheduled, evicting (``evict``) what the pool
  lacks; after each chunk but the last, what is computed is inserted and the lock moved to
  its node (``checkpoint``);
- once computed, its prompt is inserted (``insert``: whole pages; the pages the tree already
  held are freed, as ``_insert_cache`` frees them), its partial page freed, and the node
  unlocked (``dec_lock_ref``).

``--evict pages`` changes SGLang's ``evict`` to free only the pages it needs: where a leaf node
holds more, it is split and its deepest pages freed (SGLang frees the whole node). A what-if,
to measure what the node costs (docs/fleet.md), not SGLang.

Input: the JSONL lines of ``vllm_driver.py`` (``trace_tokens.py`` makes the tokens). Output
(``--out``): cached tokens per request.
"""

import argparse
import heapq
import importlib.machinery
import json
import os
import sys
import time
import types
from array import array

os.environ.setdefault("SGLANG_LOGGING_LEVEL", "WARNING")


def _absent(name):
    """A stand-in for a multimodal module SGLang's config package imports on the way to its
    cache (it needs torchvision, which is not installed here); never used."""

    class Any(type):
        def __getattr__(cls, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return cls

    def attribute(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Any(attr, (), {})

    module = types.ModuleType(name)
    module.__getattr__ = attribute
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = module


for _name in (
    "sglang.srt.multimodal.internvl_utils",
    "sglang.srt.configs.deepseek_ocr",
    "sglang.srt.configs.unlimited_ocr",
):
    _absent(_name)

import sglang  # noqa: E402
import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    EvictParams,
    EvictResult,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: E402
from trace_tokens import TokenMaker, load_jsonl  # noqa: E402


class Pages:
    """KV slots handed out a page at a time (SGLang's paged allocator); slot ``p·size + k``."""

    def __init__(self, pages, size):
        self.size = size
        self.free_pages = list(range(pages))
        self.device = "cpu"

    def available_size(self):
        return len(self.free_pages) * self.size

    def alloc(self, pages):
        taken, self.free_pages = self.free_pages[:pages], self.free_pages[pages:]
        slots = [p * self.size + k for p in taken for k in range(self.size)]
        return torch.tensor(slots, dtype=torch.int64)

    def free(self, slots):
        if len(slots):
            self.free_pages.extend(sorted({int(s) // self.size for s in slots.tolist()}))

    def free_segment(self, slots, start_pos=0):
        self.free(slots[start_pos:])


def evict_pages(self, params):
    """SGLang's ``RadixCache.evict``, but a leaf longer than what is still needed is split
    and only its deepest pages freed (the what-if of ``--evict pages``)."""
    heap = [(self.eviction_strategy.get_priority(n), n) for n in self.evictable_leaves]
    heapq.heapify(heap)
    evicted = 0
    while evicted < params.num_tokens and heap:
        _, leaf = heapq.heappop(heap)
        need = params.num_tokens - evicted
        if len(leaf.value) > need:
            stamp = leaf.last_access_time
            kept = self._split_node(leaf.key, leaf, len(leaf.key) - need)
            kept.last_access_time = stamp  # the prefix left keeps the leaf's recency
        self.token_to_kv_pool_allocator.free_segment(leaf.value, start_pos=0)
        evicted += len(leaf.value)
        self._delete_leaf(leaf)
        parent = leaf.parent
        if len(parent.children) == 0 and parent.lock_ref == 0:
            heapq.heappush(heap, (self.eviction_strategy.get_priority(parent), parent))
    return EvictResult(num_tokens_evicted=evicted)


def _insert(cache, pool, tokens, upto, slots, protected):
    """Insert the first ``upto`` tokens' whole pages; free this row's copies of the pages the
    tree held already (SGLang's ``_insert_cache``); the tree's prefix length."""
    whole = upto // pool.size * pool.size
    done = cache.insert(InsertParams(key=RadixKey(array("q", tokens[:whole])), value=slots[:whole]))
    if done.prefix_len > protected:
        pool.free(slots[protected : done.prefix_len])
    return whole


def run_cache(args, reqs, tm):
    pool = Pages(args.blocks, args.block_size)
    cache = RadixCache.create_simulated(mock_allocator=pool, page_size=args.block_size)
    size = args.block_size
    per_req, failed = [], 0
    for r in reqs:
        tokens = tm.prompt(r)
        found = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens[:-1]))))
        cached, node = found.device_prefix_len, found.last_device_node
        cache.inc_lock_ref(node)
        slots, protected, computed = cache.path_device_indices(node), cached, cached
        while computed < len(tokens):  # one chunk a step, allocated as it is scheduled
            computed = min(computed + args.chunk, len(tokens))
            need = -(-computed // size) - len(slots) // size
            short = need * size - pool.available_size()
            if short > 0:
                cache.evict(EvictParams(num_tokens=short))
            if need * size > pool.available_size():
                break
            slots = torch.cat([slots, pool.alloc(need)])
            if computed < len(tokens):  # SGLang's checkpoint: what is computed joins the tree
                whole = _insert(cache, pool, tokens, computed, slots, protected)
                key = RadixKey(array("q", tokens[:whole]))
                last = cache.match_prefix(MatchPrefixParams(key=key)).last_device_node
                owned = cache.path_device_indices(last)
                slots = torch.cat([owned, slots[len(owned) :]])
                cache.inc_lock_ref(last)
                cache.dec_lock_ref(node)
                node, protected = last, len(owned)
        if len(slots) < len(tokens):  # the pool could not hold the prompt: a miss
            failed += 1
            pool.free(slots[protected:])
            cache.dec_lock_ref(node)
            per_req.append({"id": r["id"], "input_tokens": len(tokens), "cached_tokens": 0})
            continue
        whole = _insert(cache, pool, tokens, len(tokens), slots, protected)
        pool.free(slots[whole:])
        cache.dec_lock_ref(node)
        per_req.append({"id": r["id"], "input_tokens": len(tokens), "cached_tokens": cached})
    return {
        "mode": "cache",
        "num_requests": len(reqs),
        "allocation_failures": failed,
        "requests": per_req,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--blocks", type=int, required=True, help="pages in the KV pool")
    p.add_argument("--block-size", type=int, default=512)
    p.add_argument("--evict", choices=["nodes", "pages"], default="nodes")
    p.add_argument(
        "--chunk", type=int, default=8192,
        help="tokens a prefill step computes (SGLang's chunked_prefill_size on 60-160 GiB GPUs)",
    )  # fmt: skip
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.evict == "pages":
        RadixCache.evict = evict_pages
    reqs = load_jsonl(args.trace)
    started = time.perf_counter()
    res = run_cache(args, reqs, TokenMaker(args.block_size))
    res["sglang_version"] = sglang.__version__
    res["evict"] = args.evict
    res["elapsed_wall_s"] = time.perf_counter() - started
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

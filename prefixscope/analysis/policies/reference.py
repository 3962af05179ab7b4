"""Reference policies in plain Python: the test oracle for the compiled and vectorized ones.

Written for obviousness, not speed. LRU's eviction key is (last request, -position): touching a
request's blocks deepest first inserts them in increasing key order, so an ``OrderedDict`` kept
in touch order is in key order, and its first item is always the victim.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def reference_hit_blocks(
    policy: str, requests: Sequence[Sequence[int]], capacity: int | None
) -> list[int]:
    """Per request, the leading run of its blocks cached on arrival, under ``policy``."""
    if policy not in ("ceiling", "lru"):
        raise ValueError(f"no reference for policy {policy!r}")
    if policy == "lru" and (capacity is None or capacity < 1):
        raise ValueError("lru needs a capacity of at least one block")
    cache: OrderedDict[int, None] = OrderedDict()  # least recent first
    hits = []
    for blocks in requests:
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        hits.append(k)
        for block in reversed(blocks):  # a repeated block ends at its shallowest use
            cache[block] = None
            cache.move_to_end(block)
        while policy == "lru" and len(cache) > capacity:  # type: ignore[operator]
            cache.popitem(last=False)
    return hits

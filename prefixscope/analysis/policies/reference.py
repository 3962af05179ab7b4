"""Brute-force reference policies: the test oracle for the compiled and vectorized ones.

Written for obviousness, not speed: plain dicts, the eviction rule read straight off the docs.
"""

from __future__ import annotations

from collections.abc import Sequence


def reference_hit_blocks(
    policy: str, requests: Sequence[Sequence[int]], capacity: int | None
) -> list[int]:
    """Per request, the leading run of its blocks cached on arrival, under ``policy``."""
    cache: dict[int, tuple[int, int]] = {}  # block -> (last request, -position): evict the min
    hits = []
    for r, blocks in enumerate(requests):
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        hits.append(k)
        for position in reversed(range(len(blocks))):  # a repeated block keeps its shallowest use
            cache[blocks[position]] = (r, -position)
        if policy == "ceiling":
            continue
        if policy != "lru":
            raise ValueError(f"no reference for policy {policy!r}")
        assert capacity is not None
        while len(cache) > capacity:
            del cache[min(cache, key=cache.__getitem__)]
    return hits

"""Benchmark: chained block hashing of token ids, one core. Prints tokens per second.

make bench        # or: .venv/bin/python benchmarks/hashing.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from prefixscope.ingest.hashing import hash_token_blocks

TOKENS = 50_000_000
PROMPT = 4_000  # tokens per request
BLOCK = 16


def main() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 152_000, size=TOKENS, dtype=np.uint32)
    offsets = np.arange(0, TOKENS + 1, PROMPT, dtype=np.int64)
    hash_token_blocks(offsets[:3], tokens, BLOCK)  # compile, or load the cached machine code
    times = []
    for _ in range(5):
        t = time.perf_counter()
        _, hashes = hash_token_blocks(offsets, tokens, BLOCK)
        times.append(time.perf_counter() - t)
    best = statistics.median(times)
    print(
        f"hashing {TOKENS:,} tokens ({len(offsets) - 1:,} prompts of {PROMPT:,}, block {BLOCK}) "
        f"into {len(hashes):,} chained blocks: median {best:.3f} s, "
        f"{TOKENS / best / 1e6:.0f} M tokens/s on one core"
    )


if __name__ == "__main__":
    main()

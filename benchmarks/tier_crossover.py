"""Where serving a cached prefix from a slower tier stops paying: for two models on H100, the
shortest cached prefix whose copy from DRAM (PCIe 5.0 x16, 63 GB/s) or from a shared store
(25 GB/s) plus the prefill of the new tokens takes less time than computing everything.

The rule the fleet simulation applies per request (``analysis/fleet/_kernel.py``): a hit from a
lower tier is taken only when its transfer is shorter than recomputing it. Times are the
step cost model of the roofline (``analysis/fleet/stepcost.py``).

    .venv/bin/python benchmarks/tier_crossover.py
"""

from __future__ import annotations

import numpy as np

from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.run import DRAM_GBPS, STORE_GBPS
from prefixscope.analysis.fleet.stepcost import from_roofline

MODELS = ("llama-3-8b", "llama-3.1-70b")
NEW = (1, 16, 64, 256, 1024)
PREFIXES = np.unique(np.geomspace(1, 131_072, 2_000).astype(np.int64))


def crossover(model: str, gbps: float, new: int) -> tuple[int | None, float, float]:
    """The shortest prefix (tokens) served faster than recomputed, and at 8,192 cached tokens
    the time with the transfer and the time recomputing (ms)."""
    shape = resolve_model(model)
    cost = from_roofline(shape, resolve_gpu("h100"))
    per_token = shape.kv_bytes_per_token() / (gbps * 1e9)
    h = PREFIXES.astype(float)
    served = cost.prefill_seconds(np.full_like(h, new), h) + per_token * h
    recomputed = cost.prefill_seconds(h + new, np.zeros_like(h))
    wins = np.flatnonzero(served < recomputed)
    at = 8_192.0
    s8 = float(cost.prefill_seconds(np.array([new]), np.array([at]))[0] + per_token * at)
    r8 = float(cost.prefill_seconds(np.array([at + new]), np.array([0.0]))[0])
    return (int(PREFIXES[wins[0]]) if len(wins) else None), s8 * 1e3, r8 * 1e3


def main() -> None:
    print(
        "model           tier          new  served from tier when the prefix is at least  "
        "at 8,192 cached: tier / recompute (ms)"
    )
    for model in MODELS:
        for tier, gbps in (("DRAM 63 GB/s", DRAM_GBPS), ("store 25 GB/s", STORE_GBPS)):
            for new in NEW:
                first, s8, r8 = crossover(model, gbps, new)
                where = "never (up to 131,072)" if first is None else f"{first:,} tokens"
                print(f"{model:<15} {tier:<13} {new:>5}  {where:<44} {s8:8.2f} / {r8:8.2f}")


if __name__ == "__main__":
    main()

"""A tier as given on the command line, and its blocks: GiB of the model's KV cache become
blocks through the model's KV bytes per token, as ``--capacity-gib`` does."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape
from prefixscope.analysis.fleet.run import STORE_GBPS, UNBOUNDED, Tiers, dram_gbps_for


@dataclass(frozen=True)
class TierSpec:
    """A tier as given: its GiB of the model's KV cache (``inf``: unbounded, for the store)
    and its bandwidth in GB/s (None: the default link)."""

    gib: float
    gbps: float | None = None

    def check(self, what: str) -> None:
        if not self.gib >= 0:
            raise ValueError(f"a {what} of {self.gib} GiB")
        if what == "DRAM tier" and math.isinf(self.gib):
            raise ValueError("a DRAM tier is per replica and bounded: give its GiB")
        if self.gbps is not None and not self.gbps > 0:
            raise ValueError(f"a {what}'s bandwidth must be positive, got {self.gbps} GB/s")


def tiers_of(
    dram: TierSpec | None,
    store: TierSpec | None,
    shape: ModelShape,
    block_size: int,
    kv_dtype: str,
    gpu: GpuSpec | None,
) -> Tiers:
    """GiB become blocks through the model's KV bytes per token, as ``--capacity-gib`` does;
    a DRAM tier without a bandwidth gets its GPU host's PCIe link (``gpu``: resolved by the
    caller, None for the CPU)."""
    tiers = Tiers()
    for what, tier in (("DRAM tier", dram), ("shared store", store)):
        # a tier of no whole block is no tier: its figures would be a cache that cannot exist
        finite = tier is not None and not math.isinf(tier.gib)
        if finite and shape.blocks_in(tier.gib, block_size, kv_dtype) < 1:
            raise ValueError(
                f"a {what} of {tier.gib:g} GiB holds no block of {block_size} tokens of "
                f"{shape.name} — give it at least one block's GiB"
            )
    if dram is not None:
        tiers = replace(
            tiers,
            dram_blocks=shape.blocks_in(dram.gib, block_size, kv_dtype),
            dram_gib=dram.gib,
            dram_gbps=dram.gbps or dram_gbps_for(gpu),
        )
    if store is not None:
        unbounded = math.isinf(store.gib)
        blocks = UNBOUNDED if unbounded else shape.blocks_in(store.gib, block_size, kv_dtype)
        tiers = replace(
            tiers,
            store_blocks=blocks,
            store_gib=None if unbounded else store.gib,
            store_gbps=store.gbps or STORE_GBPS,
        )
    return tiers

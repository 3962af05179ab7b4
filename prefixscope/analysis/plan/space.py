"""What the SLO planner searches: per deployment, router, DRAM tier and shared store, a series
of fleets that differ only in their replica count, each priced in GPUs.

- **Deployment** (``GPUxTP``, ``cost/deployment.py``): each replica's HBM is its KV pool, the
  capacity of its cache, so every fleet fits its HBM by construction. Its steps are priced by
  the roofline of one GPU of TP (``fleet/stepcost.py``), or, at TP 1, by the calibrated model
  of that GPU where the warehouse holds one (``--cost-model``).
- **DRAM tier**, per replica, sized from the host: the catalog's host DRAM per GPU × the
  deployment's GPUs, less :data:`DRAM_RESERVED_SHARE` kept for the operating system, the
  serving processes and their pinned transfer buffers (an assumption), then
  :data:`DRAM_SHARES` of what is left (none, half, all). It holds the replica's KV once per
  token (every KV head, or the latent once); each GPU reads its own share over its own host
  link (the catalog's ``host_link_gbps``; where the GPU does not say, the fleet's PCIe 5.0
  default, ``fleet/run.py:dram_gbps_for``).
- **Shared store**: none, or one of :data:`STORE_GIB` (2 and 8 TiB: a third and 1.3 times the
  bundled hour's working set of DeepSeek-V3 KV), read at ``STORE_GBPS`` per replica (one
  200 Gb/s NIC) for the replica's KV of a token.

A fleet costs ``replicas × (GPUs × $ per GPU-hour + DRAM GB × dram_gb_hour) + store GB ×
store_gb_hour`` (``prices.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefixscope.analysis.cost.deployment import Deployment, memory_split, parse_deployment
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import GIB, ModelShape
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.fleet.run import STORE_GBPS, Engine, Tiers, dram_gbps_for
from prefixscope.analysis.fleet.stepcost import StepCost

#: Host DRAM kept out of the DRAM tier: a quarter (an assumption; the catalog's figure is the
#: whole host's memory divided by its GPUs).
DRAM_RESERVED_SHARE = 0.25
#: The DRAM tier options, as shares of the host DRAM left after the reserve.
DRAM_SHARES = (0.0, 0.5, 1.0)
#: The shared store options, GiB (None: no store).
STORE_GIB: tuple[float | None, ...] = (None, 2048.0, 8192.0)
GB = 1e9


@dataclass(frozen=True)
class Replica:
    """One deployment serving the model: its KV pool and what its steps cost."""

    deployment: str  # GPUxTP as parse_deployment names it
    gpu: str  # the catalog name of its GPU
    tp: int
    kv_pool_blocks: int
    kv_pool_gib_per_gpu: float
    host_dram_gib: float  # the whole replica's host DRAM (catalog figure per GPU × TP)
    host_link_gbps: float
    kv_bytes_per_gpu_token: int  # what one GPU holds (and reads) per token
    kv_bytes_per_token: int  # the replica's KV of a token, once (every head, or the latent)
    engine: Engine
    gpu_spec: GpuSpec  # what its GPU-hour is priced from (a GPU file's own price included)


@dataclass(frozen=True)
class Series:
    """Fleets of one replica kind, router and tiers; only the replica count varies."""

    replica: Replica
    router: str
    dram_gib: float  # per replica; 0: none
    store_gib: float | None  # None: none
    tiers: Tiers
    usd_per_replica_hour: float
    usd_fixed_hour: float  # the store

    def usd_per_hour(self, replicas: int) -> float:
        return replicas * self.usd_per_replica_hour + self.usd_fixed_hour

    def gpus(self, replicas: int) -> int:
        return replicas * self.replica.tp

    @property
    def key(self) -> tuple:
        return (self.replica.deployment, self.router, self.dram_gib, self.store_gib)


def replica_of(
    text: str | Deployment, shape: ModelShape, block_size: int, kv_dtype: str, cost: StepCost
) -> Replica:
    """``text`` (``GPUxTP``, or parsed already) serving ``shape``; ValueError, in one line,
    when it is unknown or the model does not fit it (``memory_split`` names the smallest TP
    that does)."""
    deployment = parse_deployment(text)
    split = memory_split(shape, deployment, block_size=block_size, kv_dtype=kv_dtype)
    gpu = deployment.gpu
    if split.kv_pool_blocks < 1:
        raise ValueError(
            f"{shape.name} on {deployment.name} leaves no block of {block_size} tokens of KV "
            "— use more GPUs per replica"
        )
    return Replica(
        deployment=deployment.name,
        gpu=gpu.name,
        tp=deployment.tp,
        kv_pool_blocks=split.kv_pool_blocks,
        kv_pool_gib_per_gpu=split.kv_pool_gib,
        host_dram_gib=(gpu.host_dram_gib or 0.0) * deployment.tp,
        host_link_gbps=dram_gbps_for(gpu),  # the fleet's rule, where the GPU does not say
        kv_bytes_per_gpu_token=split.kv_bytes_per_token,
        kv_bytes_per_token=shape.kv_bytes_per_token(kv_dtype),
        # vLLM's step budget and batch size (the fleet's defaults); a tier copies one GPU's
        # share of a token to that GPU
        engine=Engine(cost, kv_bytes_per_token=float(split.kv_bytes_per_token)),
        gpu_spec=gpu,
    )


def refuse_short_pools(replicas: Sequence[Replica], longest: int, engine: str) -> None:
    """Under a KV pool every request must fit one replica's pool alone, as an engine refuses
    at start-up a context longer than its pool (``fleet/pool_inputs.py``); a deployment that
    cannot hold the trace's longest request (``longest`` blocks) is named before any fleet
    runs, with what to do, rather than failing its first fleet."""
    short = [r for r in replicas if r.kv_pool_blocks < longest]
    if short:
        pools = ", ".join(f"{r.deployment}'s {r.kv_pool_blocks:,}" for r in short)
        raise ValueError(
            f"under --engine {engine} the trace's longest request holds {longest:,} blocks of "
            f"KV (its prompt and output), more than the pool of {pools} blocks: leave that "
            "deployment out, give it more GPUs per replica, or search --engine ideal (a lower "
            "bound)"
        )


def dram_options(replica: Replica) -> list[float]:
    """The DRAM tier sizes searched for ``replica``, GiB (0 first: none)."""
    usable = replica.host_dram_gib * (1 - DRAM_RESERVED_SHARE)
    return list(dict.fromkeys(round(share * usable, 3) for share in DRAM_SHARES))


def tiers_for(replica: Replica, dram_gib: float, store_gib: float | None, block_size: int) -> Tiers:
    """The tiers in blocks of the replica's KV, and their links as the engine sees them: one
    GPU's share of a token over its own host link (the GPUs read in parallel); the store's
    copy of the replica's KV of a token through one NIC, so its rate in the loop's per-GPU
    bytes is ``STORE_GBPS × per-GPU bytes / replica bytes``."""
    block = replica.kv_bytes_per_token * block_size
    share = replica.kv_bytes_per_gpu_token / replica.kv_bytes_per_token
    return Tiers(
        dram_blocks=int(dram_gib * GIB // block),
        dram_gbps=replica.host_link_gbps,
        store_blocks=None if store_gib is None else int(store_gib * GIB // block),
        store_gbps=STORE_GBPS * share,
        dram_gib=dram_gib or None,
        store_gib=store_gib,
    )


def series_of(
    replicas: list[Replica],
    routers: tuple[str, ...],
    prices: Prices,
    block_size: int,
    tiered: bool = True,
) -> list[Series]:
    """Every replica × router × DRAM tier × store (``tiered``: else no tier and no store),
    cheapest per replica first (the order the search meets them)."""
    out = []
    for r in replicas:
        drams = dram_options(r) if tiered else [0.0]
        stores = STORE_GIB if tiered else (None,)
        for dram in drams:
            for store in stores:
                tiers = tiers_for(r, dram, store, block_size)
                if dram and tiers.dram_blocks < 1 or store is not None and not tiers.store_blocks:
                    continue  # a tier of no whole block is no tier
                per_replica = prices.per_hour(1, dram * GIB / GB, 0.0, r.tp, r.gpu_spec)
                fixed = prices.per_hour(0, 0.0, (store or 0.0) * GIB / GB)
                out += [Series(r, router, dram, store, tiers, per_replica, fixed)
                        for router in routers]  # fmt: skip
    return sorted(out, key=lambda s: (s.usd_per_hour(1), s.key))

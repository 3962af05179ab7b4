"""The engines: how a replica keeps KV. A registry, as the routers and eviction policies are;
each entry states its rule and the source it follows (docs/fleet.md, "Engines").

- ``ideal``: the prefix cache apart from the memory running requests hold (its capacity is all
  cache), looked up and filled at arrival; one replica equals ``simulate``;
- ``vllm``, ``sglang``: one KV pool per replica holds the running requests' blocks and the
  prefix cache, so load shrinks the cache (``_pool.py``).

Below HBM, ``ideal`` keeps an exclusive DRAM tier and the store (``_cache.py``); ``vllm``
writes every computed prompt through to them, as vLLM's CPU offloading and LMCache do
(``_tiers.write_through``); ``sglang`` writes it to host memory, which keeps what the GPU
holds, and from there to the store, as SGLang's HiCache does (``_tiers.write_host``), so its
store needs a DRAM tier (:attr:`EngineKind.store_from_dram`).
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.fleet import _records


@dataclass(frozen=True)
class EngineKind:
    name: str
    code: int  # _records.IDEAL or the pool's code in ``_pool``
    rule: str
    reference: str
    #: why the engine's store needs a DRAM tier (None: it takes either tier alone)
    store_from_dram: str | None = None

    @property
    def pooled(self) -> bool:
        return self.code != _records.IDEAL


ENGINES: dict[str, EngineKind] = {
    e.name: e
    for e in (
        EngineKind(
            "ideal",
            _records.IDEAL,
            "a prefix cache of the whole capacity, apart from the running requests' memory",
            "simulate (docs/simulation.md)",
        ),
        EngineKind(
            "vllm",
            _records.VLLM,
            "one pool of full blocks as vLLM hashes them: running requests hold their blocks; "
            "freed cached blocks join the free queue's tail deepest first, hashless ones its "
            "head; allocation takes the head; the newest running request is preempted when no "
            "block is free; a request's hit is its first admission's",
            "vLLM v1 block_pool.py, kv_cache_manager.py, sched/scheduler.py",
        ),
        EngineKind(
            "sglang",
            _records.SGLANG,
            "one pool: running requests lock their path; the radix cache evicts the unlocked "
            "leaf last accessed longest ago; the newest running request is preempted when no "
            "block is free",
            "SGLang mem_cache/radix_cache.py, hiradix_cache.py",
            "SGLang's HiCache writes its storage backend from host memory "
            "(hiradix_cache.py, write_backup_storage)",
        ),
    )
}


def resolve_engine(name: str) -> EngineKind:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name]

"""The routers: which replica serves a request. A registry, as the eviction policies are; each
entry states its rule and the reference it follows (docs/fleet.md has the defaults' sources).

Two kinds:

- **fixed** routers (``round-robin``, ``random``, ``session``) decide from the request and
  what was routed before, never from cache state or time, so the routing is computed first
  (``assign.py``) and each replica can then be simulated on its own, anywhere;
- **stateful** routers (``least-loaded``, ``cache-aware``, ``kv-aware``) read the replicas'
  queues or caches at the request's arrival, inside the compiled loop (``_route.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.analysis.fleet import _records


@dataclass(frozen=True)
class RouterSettings:
    """Every router's knobs, with the reference implementations' defaults.

    - ``seed``: ``random``'s generator seed;
    - ``session_blocks`` (k): ``session`` hashes the session id, or else the first k blocks
      (the chained hash of block k identifies the whole k-block prefix);
    - ``balance_factor`` (c): ``session``'s bounded loads: a replica takes a request only while
      it has been routed fewer than ⌈c · (routed + 1) / replicas⌉ requests (HAProxy's
      ``hash-balance-factor 125`` is c = 1.25);
    - ``virtual_nodes``: points per replica on ``session``'s hash ring;
    - ``cache_threshold``, ``balance_abs``, ``balance_rel``, ``tree_tokens``,
      ``evict_interval_s``: ``cache-aware`` as SGLang's router sets them (0.3, 64, 1.5,
      2^26, 120 s);
    - ``overlap_weight``, ``load_weight``: ``kv-aware``'s score, Dynamo's default weight 1.
    """

    seed: int = 0
    session_blocks: int = 4
    balance_factor: float = 1.25
    virtual_nodes: int = 160
    cache_threshold: float = 0.3
    balance_abs: int = 64
    balance_rel: float = 1.5
    tree_tokens: int = 2**26
    evict_interval_s: float = 120.0
    overlap_weight: float = 1.0
    load_weight: float = 1.0

    def check(self) -> None:
        if self.session_blocks < 1:
            raise ValueError(f"session blocks must be at least 1, got {self.session_blocks}")
        if self.balance_factor < 1:
            raise ValueError(f"the balance factor must be at least 1, got {self.balance_factor}")
        if self.virtual_nodes < 1:
            raise ValueError(f"virtual nodes must be at least 1, got {self.virtual_nodes}")
        if not 0 <= self.cache_threshold <= 1:
            raise ValueError(f"the cache threshold is a share, got {self.cache_threshold}")
        if self.tree_tokens < 1:
            raise ValueError(f"the router tree needs at least one token, got {self.tree_tokens}")


@dataclass(frozen=True)
class Router:
    name: str
    kind: int  # _records.FIXED or the stateful rule's code in ``_route.route``
    rule: str
    reference: str

    @property
    def fixed(self) -> bool:
        return self.kind == _records.FIXED


ROUTERS: dict[str, Router] = {
    r.name: r
    for r in (
        Router(
            "round-robin",
            _records.FIXED,
            "request i goes to replica i mod N",
            "vLLM router / SGLang gateway `round_robin`",
        ),
        Router(
            "random",
            _records.FIXED,
            "a uniform replica per request, from a seeded generator",
            "SGLang gateway `random`",
        ),
        Router(
            "session",
            _records.FIXED,
            "consistent hashing of the session id (else the first k blocks) with bounded loads",
            "Mirrokni, Thorup and Zadimoghaddam (SODA 2018); HAProxy `hash-balance-factor`",
        ),
        Router(
            "least-loaded",
            _records.LEAST_LOADED,
            "the replica with the fewest prefill tokens queued (ties rotate)",
            "SGLang gateway `shortest_queue`, measured in tokens",
        ),
        Router(
            "cache-aware",
            _records.CACHE_AWARE,
            "longest match in an approximate per-replica tree when the match share ≥ 0.3, "
            "else the smallest tree; the least-loaded when loads are imbalanced",
            "SGLang gateway / vLLM router `cache_aware`",
        ),
        Router(
            "kv-aware",
            _records.KV_AWARE,
            "the highest overlap weight × cached blocks − load (queued prefill and active "
            "decode blocks), from an exact view of every cache",
            "Dynamo KV router; llm-d precise prefix-cache scorer",
        ),
    )
}


def resolve_router(name: str) -> Router:
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
    return ROUTERS[name]

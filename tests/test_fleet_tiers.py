"""Memory tiers in the fleet: a DRAM tier per replica and one shared store. What must hold:
the sources add up, a DRAM tier of 0 is no tier, LRU over HBM + DRAM is one LRU stack, an
unbounded store reaches the ceiling, and a transfer slower than recomputing is not taken."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.caches import tiered_policies
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.fleet.run import UNBOUNDED, Engine, Fleet, Tiers, Traffic, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.measure import hit_tokens
from tests.test_fleet import sessions_trace

MODEL = resolve_model("llama-3-8b")
ENGINE = Engine(
    from_roofline(MODEL, resolve_gpu("h100")), kv_bytes_per_token=MODEL.kv_bytes_per_token()
)
FREE = float("inf")  # a link that costs nothing: every hit is taken


def lru(trace, capacity: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    return hit_tokens(trace, POLICIES["lru"].hit_blocks(trace, capacity))


@pytest.mark.parametrize("router", list(ROUTERS))
@pytest.mark.parametrize(
    "tiers",
    [
        Tiers(dram_blocks=30),
        Tiers(store_blocks=80),
        Tiers(dram_blocks=20, store_blocks=UNBOUNDED),
        Tiers(dram_blocks=20, store_blocks=50, store_gbps=0.05),
    ],
    ids=["dram", "store", "dram+unbounded-store", "dram+slow-store"],
)
def test_hit_tokens_by_source_add_up_and_so_do_the_savings(router: str, tiers: Tiers) -> None:
    """Under ``lru``; every tiered policy's sources and savings are the oracle's
    (``test_fleet_reference.py``)."""
    trace, traffic = sessions_trace(block_size=64)
    out = simulate_fleet(trace, traffic, Fleet(router, 3, 15, tiers=tiers), ENGINE)
    np.testing.assert_array_equal(out.source_tokens.sum(axis=1), out.hit_tokens)
    assert out.source_tokens[:, 1:].sum() > 0  # the lower tiers served something
    new = np.maximum(trace.input_tokens - out.hit_tokens, 1)
    with_cache = ENGINE.cost.prefill_seconds(new, trace.input_tokens - new) + out.transfer_s
    np.testing.assert_allclose(out.source_saved_s.sum(axis=1), out.no_cache_s - with_cache,
                               rtol=1e-9, atol=1e-12)  # fmt: skip
    assert (out.transfer_s[out.source_tokens[:, 1:].sum(axis=1) == 0] == 0).all()


@pytest.mark.parametrize("router", list(ROUTERS))
def test_a_dram_tier_of_zero_is_no_tier(router: str) -> None:
    trace, traffic = sessions_trace()
    plain = simulate_fleet(trace, traffic, Fleet(router, 3, 20), ENGINE)
    zero = simulate_fleet(trace, traffic, Fleet(router, 3, 20, tiers=Tiers(dram_blocks=0)), ENGINE)
    for name in ("replica", "hit_tokens", "ttft", "busy", "steps", "source_tokens"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(zero, name))


@pytest.mark.parametrize(("hbm", "dram"), [(1, 1), (10, 25), (40, 5), (3, 200)])
def test_lru_over_hbm_and_a_dram_tier_is_one_lru_stack(bundled_trace, hbm: int, dram: int):
    """LRU with a victim tier is the same stack: HBM holds its top H blocks, DRAM the next D."""
    traffic = Traffic(np.zeros(bundled_trace.n_requests, np.int64))
    for scale in (1, 100):
        h, d = hbm * scale, dram * scale
        tiers = Tiers(dram_blocks=d, dram_gbps=FREE)
        out = simulate_fleet(
            bundled_trace, traffic, Fleet("round-robin", 1, h, tiers=tiers), ENGINE
        )
        np.testing.assert_array_equal(out.hit_tokens, lru(bundled_trace, h + d))
        np.testing.assert_array_equal(out.source_tokens[:, 0], _hbm_share(bundled_trace, out, h))


def _hbm_share(trace, out, h: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The HBM part of each request's hit: the leading run LRU(H) alone would have served,
    capped by the whole hit (the HBM blocks of the run come first in a prefix-closed stack)."""
    return np.minimum(lru(trace, h), out.hit_tokens)


@pytest.mark.parametrize("router", list(ROUTERS))
@pytest.mark.parametrize("policy", tiered_policies())
def test_an_unbounded_shared_store_reaches_the_single_cache_ceiling(
    router: str, policy: str
) -> None:
    """Whatever HBM's policy: a store that keeps every block computed, read for free, serves
    every block ever computed."""
    trace, traffic = sessions_trace(shared_first=True)
    tiers = Tiers(store_blocks=UNBOUNDED, store_gbps=FREE)
    out = simulate_fleet(trace, traffic, Fleet(router, 4, 3, policy, tiers=tiers), ENGINE)
    ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None))
    np.testing.assert_array_equal(out.hit_tokens, ceiling)
    assert out.source_tokens[:, 2].sum() > 0


def test_a_transfer_slower_than_recomputing_is_recomputed() -> None:
    """Short prompts on a slow link: reading their prefix back costs more than computing it
    again (the linear layers read their weights whatever the few tokens), so the prefix is
    recomputed; on a fast link it is served."""
    trace, traffic = sessions_trace(block_size=16)
    assert trace.input_tokens.max() < 1_000
    slow = Tiers(store_blocks=UNBOUNDED, store_gbps=0.01)
    fast = replace(slow, store_gbps=FREE)
    got = {}
    for name, tiers in (("slow", slow), ("fast", fast)):
        got[name] = simulate_fleet(trace, traffic, Fleet("round-robin", 4, 2, tiers=tiers), ENGINE)
    assert got["slow"].source_tokens[:, 2].sum() == 0
    assert got["fast"].source_tokens[:, 2].sum() > 0
    # what the slow link did not serve was recomputed: request by request, recomputing costs
    # no more than serving what the fast link served, over the slow link
    assert (got["slow"].transfer_s == 0).all()
    inp = trace.input_tokens
    new_slow = np.maximum(inp - got["slow"].hit_tokens, 1)
    new_fast = np.maximum(inp - got["fast"].hit_tokens, 1)
    cost = ENGINE.cost.prefill_seconds
    over_slow_link = got["fast"].source_tokens[:, 2] * MODEL.kv_bytes_per_token() / 0.01e9
    served = got["fast"].source_tokens[:, 2] > 0
    assert served.any()
    recomputed = cost(new_slow, inp - new_slow)[served]
    assert (recomputed <= (cost(new_fast, inp - new_fast) + over_slow_link)[served] + 1e-12).all()


def test_transfers_are_paid_in_busy_time_and_ttft() -> None:
    trace, traffic = sessions_trace(gap_s=100.0, block_size=64)
    traffic = Traffic(np.zeros(trace.n_requests, np.int64))
    tiers = Tiers(store_blocks=UNBOUNDED)  # 25 GB/s: faster than recomputing these
    out = simulate_fleet(trace, traffic, Fleet("round-robin", 3, 2, tiers=tiers), ENGINE)
    assert out.transfer_s.sum() > 0
    new = np.maximum(trace.input_tokens - out.hit_tokens, 1)
    service = ENGINE.cost.prefill_seconds(new, trace.input_tokens - new) + out.transfer_s
    np.testing.assert_allclose(out.ttft, service, rtol=1e-9)
    assert out.busy.sum() == pytest.approx(service.sum(), rel=1e-9)


@pytest.mark.parametrize(("gpu", "gbps"), [("h100", 63.0), ("h200", 63.0), ("a100", 31.5)])
def test_a_dram_tier_reads_at_its_gpu_hosts_pcie_link_unless_told(gpu: str, gbps: float) -> None:
    from prefixscope.analysis.fleet.tierspec import TierSpec, tiers_of

    shape, spec = resolve_model("llama-3-8b"), resolve_gpu(gpu)
    tiers = tiers_of(TierSpec(64.0), None, shape, 512, "bf16", spec)
    assert tiers.dram_gbps == gbps and tiers.dram_blocks == 64 * 2**30 // (512 * 131072)
    assert tiers_of(TierSpec(64.0, 10.0), None, shape, 512, "bf16", spec).dram_gbps == 10.0
    assert tiers_of(TierSpec(64.0), None, shape, 512, "bf16", None).dram_gbps == 63.0


@pytest.mark.parametrize(
    ("dram", "store"),
    [(1e-320, None), (1e-6, None), (None, 1e-9), (None, 0.01)],
)
def test_a_tier_of_no_whole_block_is_refused(dram, store) -> None:
    """A tier that holds no block of the model's KV would be priced and reported as a tier
    that cannot exist."""
    from prefixscope.analysis.fleet.tierspec import TierSpec, tiers_of

    with pytest.raises(ValueError, match="holds no block of 512 tokens of llama-3-8b — give"):
        tiers_of(
            None if dram is None else TierSpec(dram),
            None if store is None else TierSpec(store),
            resolve_model("llama-3-8b"),
            512,
            "bf16",
            resolve_gpu("h100"),
        )

"""GPU-seconds are GPUs × seconds: a replica's busy time times its deployment's GPUs, so tensor
parallelism never makes the same traffic cheaper in GPU time (it only adds communication)
while it makes each prefill faster; dollars are GPU-hours × one GPU's price; a memory tier is
judged by the GPU dollars its hits save against its own price."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import GIB, resolve_model
from prefixscope.analysis.cost.prices import GPU_SECONDS, Prices
from prefixscope.analysis.cost.savings import cost_model, savings_rows
from prefixscope.analysis.fleet.run import UNBOUNDED, Engine, Fleet, Tiers, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.fleet.tables import GB, Pricing, hit_rate_rows
from prefixscope.analysis.plan.fleets import tier_dollars
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.tiers import tier_verdict
from tests.test_fleet import sessions_trace

#: Models of every family the catalog prices (dense, GQA, MoE, MLA) with the TPs that shard them.
MODELS = {
    "llama-3-8b": (1, 2, 4, 8),
    "llama-3.1-70b": (1, 2, 4, 8),
    "qwen2.5-7b": (1, 2, 4),
    "deepseek-v3": (1, 2, 4, 8),
    "gpt-oss-120b": (1, 2, 4, 8),
    "qwen3-235b-a22b": (1, 2, 4, 8),
}


@st.composite
def outcomes(draw: st.DrawFn) -> pl.DataFrame:
    n = draw(st.integers(1, 30))
    inputs = draw(st.lists(st.integers(1, 40_000), min_size=n, max_size=n))
    shares = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    tenants = draw(st.lists(st.sampled_from(["a", "b"]), min_size=n, max_size=n))
    return pl.DataFrame(
        {
            "tenant": tenants,
            "input_tokens": inputs,
            "hit_tokens": [int(i * s) for i, s in zip(inputs, shares, strict=True)],
        }
    )


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(sorted(MODELS)),
    gpu=st.sampled_from(["a100", "h100", "h200", "b200"]),
    data=st.data(),
    rows=outcomes(),
)
def test_tensor_parallelism_never_costs_fewer_gpu_seconds_and_cuts_ttft(
    model: str, gpu: str, data: st.DataObject, rows: pl.DataFrame
) -> None:
    tp = data.draw(st.sampled_from(MODELS[model][1:]))
    price = data.draw(st.floats(0.5, 20))
    one = savings_rows(rows, 3600.0, cost_model(model, gpu, "roofline", tp=1), price)
    many = savings_rows(rows, 3600.0, cost_model(model, gpu, "roofline", tp=tp), price)
    for a, b in zip(one, many, strict=True):
        assert b["prefill_gpu_seconds_no_cache"] >= a["prefill_gpu_seconds_no_cache"]
        assert b["prefill_gpu_seconds_with_cache"] >= a["prefill_gpu_seconds_with_cache"]
        assert b["ttft_p50_no_cache_s"] < a["ttft_p50_no_cache_s"]
        assert b["ttft_p95_with_cache_s"] < a["ttft_p95_with_cache_s"]
        for r in (a, b):  # dollars are GPU-hours saved × the price of one GPU-hour
            assert r["usd_saved_per_hour"] == pytest.approx(
                r["gpu_seconds_saved_per_hour"] / 3600 * price
            )
            assert r["gpu_seconds_unit"] == GPU_SECONDS


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_prefill_at_tp_counts_tp_gpus_for_its_time(tp: int) -> None:
    rows = pl.DataFrame({"tenant": ["a"], "input_tokens": [4096], "hit_tokens": [0]})
    cost = cost_model("llama-3.1-70b", "h100", "roofline", tp=tp)
    (fleet, _) = savings_rows(rows, 3600.0, cost, 2.5)
    wall = float(cost.seconds(np.array([4096.0]), np.array([0.0]))[0])
    assert fleet["ttft_p50_no_cache_s"] == pytest.approx(wall)
    assert fleet["prefill_gpu_seconds_no_cache"] == pytest.approx(wall * tp)


def _fleet_rows(tiers: Tiers, pricing: Pricing, replicas: int = 3):  # type: ignore[no-untyped-def]
    trace, traffic = sessions_trace(n_sessions=30, turns=6, seed=3)
    model = resolve_model("llama-3-8b")
    engine = Engine(
        from_roofline(model, resolve_gpu("h100"), tp=pricing.gpus),
        kv_bytes_per_token=model.kv_bytes_per_token(),
    )
    fleet = Fleet("round-robin", replicas, 40, tiers=tiers)
    o = simulate_fleet(trace, traffic, fleet, engine)
    return hit_rate_rows(trace, o, np.zeros(trace.n_requests), ["all"], 0, pricing), o, trace


@pytest.mark.parametrize(
    "tiers",
    [
        Tiers(),
        Tiers(dram_blocks=64, dram_gib=4.0),
        Tiers(store_blocks=128, store_gib=8.0),
        Tiers(dram_blocks=64, dram_gib=4.0, store_blocks=UNBOUNDED),
    ],
)
@pytest.mark.parametrize("gpus", [1, 4])
def test_fleet_rows_count_every_gpu_and_price_their_tiers(tiers: Tiers, gpus: int) -> None:
    prices = Prices(gpu_hour=3.0, dram_gb_hour=0.01, store_gb_hour=0.004)
    model = resolve_model("llama-3-8b")
    pricing = Pricing(
        "llama-3-8b", "h100", "roofline", gpus=gpus, gpu_hour=3.0, prices=prices,
        kv_bytes_per_token=float(model.kv_bytes_per_token()),
    )  # fmt: skip
    rows, o, trace = _fleet_rows(tiers, pricing)
    whole = next(r for r in rows if r["tenant"] == FLEET)
    assert whole["prefill_gpu_seconds_no_cache"] == pytest.approx(o.no_cache_s.sum() * gpus)
    saved = o.source_saved_s.sum(axis=0) * gpus
    assert whole["gpu_seconds_saved_dram"] == pytest.approx(saved[1])
    span = whole["traffic_seconds"]
    assert whole["usd_saved_per_hour"] == pytest.approx(saved.sum() / span * 3.0)
    assert whole["tier_usd_saved_per_hour"] == pytest.approx((saved[1] + saved[2]) / span * 3.0)
    block_gb = model.kv_bytes_per_token() * trace.block_size / GB
    store_gb = {None: 0.0, UNBOUNDED: trace.n_unique * block_gb}.get(
        tiers.store_blocks, (tiers.store_gib or 0) * GIB / GB
    )
    dram_gb = 3 * (tiers.dram_gib or 0) * GIB / GB
    assert whole["tier_gib"] == pytest.approx((dram_gb + store_gb) * GB / GIB)
    assert whole["tier_usd_per_hour"] == pytest.approx(dram_gb * 0.01 + store_gb * 0.004)
    assert whole["tier_net_usd_per_hour"] == pytest.approx(
        whole["tier_usd_saved_per_hour"] - whole["tier_usd_per_hour"]
    )
    for r in rows:
        assert r["gpu_seconds_unit"] == GPU_SECONDS
        if r["tenant"] != FLEET:  # a tenant does not buy the tier
            assert r["tier_usd_per_hour"] is None and r["tier_net_usd_per_hour"] is None


def _verdict_rows(nets: list[tuple[float, float, float]]) -> pl.DataFrame:
    """Fleet rows of one router with a store of each (GiB, saved $, cost $)."""
    return pl.DataFrame(
        {
            "router": ["round-robin"] * len(nets),
            "replicas": [4] * len(nets),
            "dram_blocks": [0] * len(nets),
            "store_blocks": [int(g * 16) for g, _, _ in nets],
            "store_gib": [g for g, _, _ in nets],
            "store_unbounded": [False] * len(nets),
            "tier_gib": [g for g, _, _ in nets],
            "tier_usd_saved_per_hour": [s for _, s, _ in nets],
            "tier_usd_per_hour": [c for _, _, c in nets],
            "tier_net_usd_per_hour": [s - c for _, s, c in nets],
        }
    )


@pytest.mark.parametrize(
    ("nets", "says"),
    [
        ([(64, 0.01, 0.14), (1024, 0.58, 2.20)],
         "No tier simulated pays for itself at this load: the closest, a 64 GiB store, saves "
         "$0.01 of GPU time an hour and costs $0.14 (net -$0.13)."),
        ([(64, 0.30, 0.10), (256, 0.90, 0.50), (1024, 1.00, 2.00)],
         "2 of 3 tiers simulated pay for themselves at this load, the smallest a 64 GiB store "
         "(net $0.20 an hour); the best, a 256 GiB store, saves $0.90 of GPU time an hour for "
         "$0.50: net $0.40."),
        ([(0, 0.0, 0.0)], ""),
    ],
)  # fmt: skip
def test_the_tier_verdict_names_the_break_even(nets, says: str) -> None:
    assert tier_verdict(_verdict_rows(nets)) == says


def test_the_plan_prices_a_fleets_tiers_at_its_own_prices() -> None:
    prices = Prices(gpu_hour=2.0, dram_gb_hour=0.01, store_gb_hour=0.0)
    row = {
        "deployment": "h100x2", "gpu": "h100", "replicas": 3, "dram_blocks": 10,
        "store_blocks": None, "store_unbounded": None, "traffic_seconds": 1800.0,
        "gpu_seconds_saved_dram": 360.0, "gpu_seconds_saved_store": 0.0,
    }  # fmt: skip
    cost = prices.per_hour(3, 100.0, 0.0, 2, "h100")  # 3 × 2 GPUs and 3 × 100 GB of DRAM
    saved, own = tier_dollars(row, cost, prices)
    assert saved == pytest.approx(360.0 / 1800.0 * 2.0)
    assert own == pytest.approx(3 * 100.0 * 0.01)
    assert tier_dollars({**row, "dram_blocks": 0}, cost, prices) == (None, None)


def test_rows_written_before_the_unit_are_converted_once(tmp_path) -> None:
    path = tmp_path / "old.duckdb"
    warehouse.connect(path).close()
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO savings (run_id, outcomes_run_id, policy, isolation, tenant, model, gpu, "
        "cost_model, requests, input_tokens, hit_tokens, prefill_gpu_seconds_no_cache, "
        "prefill_gpu_seconds_with_cache, gpu_seconds_saved, gpu_seconds_saved_per_hour, "
        "ttft_p50_no_cache_s, ttft_p95_no_cache_s, ttft_p50_with_cache_s, "
        "ttft_p95_with_cache_s, gpus) VALUES "
        "('r', 'o', 'lru', 'shared', '*', 'm', 'h100', 'roofline', 1, 1, 0, 10, 6, 4, 8, "
        "1, 1, 1, 1, 4), "
        "('r', 'o', 'lru', 'shared', 'a', 'm', 'h100', 'roofline', 1, 1, 0, 10, 6, 4, 8, "
        "1, 1, 1, 1, NULL)"
    )
    con.close()
    for _ in range(2):  # the second open finds nothing to convert
        con = warehouse.connect(path)
        try:
            got = con.sql(
                "SELECT tenant, prefill_gpu_seconds_no_cache, prefill_gpu_seconds_with_cache, "
                "gpu_seconds_saved, gpu_seconds_saved_per_hour, ttft_p50_no_cache_s, "
                "gpu_seconds_unit FROM savings ORDER BY tenant"
            ).fetchall()
        finally:
            con.close()
        assert got == [
            ("*", 40.0, 24.0, 16.0, 32.0, 1.0, GPU_SECONDS),
            ("a", 10.0, 6.0, 4.0, 8.0, 1.0, GPU_SECONDS),
        ]

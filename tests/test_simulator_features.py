"""Capacity in GiB, tenant isolation, steady state, time series, outcomes and pins."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.cost.models import CATALOG, ModelShape, resolve_model
from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.simulation.grid import simulate_grid
from prefixscope.analysis.simulation.replay import replay
from prefixscope.analysis.simulation.scenarios import Scenario, Settings
from prefixscope.analysis.structure import pins
from prefixscope.analysis.trace import isolation as iso
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.steady import batch_means_ci, mser5, warm_up
from prefixscope.cli import main
from tests.conftest import Bundled

# --- capacity in the units people buy -----------------------------------------------------

# KV bytes per token from the published shapes: 2 (K and V) x layers x KV heads x head dim x
# bytes; DeepSeek-V3 caches one latent of kv_lora_rank + qk_rope_head_dim per layer.
PUBLISHED = [
    ("llama-3-8b", 2 * 32 * 8 * 128 * 2),
    ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2),
    ("llama-2-70b", 2 * 80 * 8 * 128 * 2),
    ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),
    ("qwen2.5-72b", 2 * 80 * 8 * 128 * 2),
    ("mistral-7b", 2 * 32 * 8 * 128 * 2),
    ("deepseek-v3", 61 * (512 + 64) * 2),
]


@pytest.mark.parametrize(("model", "bf16_bytes"), PUBLISHED)
def test_kv_bytes_per_token_of_the_catalog(model: str, bf16_bytes: int) -> None:
    shape = resolve_model(model.upper())
    assert shape.kv_bytes_per_token("bf16") == bf16_bytes
    assert shape.kv_bytes_per_token("fp8") == bf16_bytes // 2
    # 16 GiB in blocks of 16 tokens: whole blocks only
    assert shape.blocks_in(16, 16) == (16 * 2**30) // (bf16_bytes * 16)


def test_a_hugging_face_config_gives_the_same_shape(tmp_path) -> None:
    config = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    shape = ModelShape.from_hf_config(path, "mine")
    assert shape.kv_bytes_per_token() == CATALOG["llama-3-8b"].kv_bytes_per_token()
    with pytest.raises(ValueError, match="unknown model"):
        resolve_model("gpt-17")


# --- isolation ----------------------------------------------------------------------------

chains = st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), min_size=2, max_size=25)


def trace_of(requests, tenants):  # type: ignore[no-untyped-def]
    return build_trace(requests, [4 * len(r) for r in requests], [str(t) for t in tenants], 4)


@settings(max_examples=80, deadline=None)
@given(requests=chains, data=st.data(), capacity=st.integers(1, 10))
@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "s3fifo", "belady", "ceiling"])
def test_salted_tenants_never_hit_each_other(policy, requests, data, capacity) -> None:
    tenants = data.draw(st.lists(st.integers(0, 2), min_size=len(requests), max_size=len(requests)))
    trace = trace_of(requests, tenants)
    cap = capacity if POLICIES[policy].bounded else None
    salted = replay(trace, policy, cap, PolicyOptions(), "salted")
    assert not salted.cross.any()
    shared = replay(trace, "ceiling", None, PolicyOptions(), "shared")
    assert np.all(
        replay(trace, "ceiling", None, PolicyOptions(), "salted").hit_blocks <= shared.hit_blocks
    )


def test_partitions_are_each_tenants_own_cache() -> None:
    # tenant a: 3 requests of 2 blocks; tenant b: 1 request of 2 blocks -> quotas 6/8 and 2/8
    requests = [[1, 2], [3, 4], [1, 2], [5, 6]]
    trace = trace_of(requests, ["a", "a", "a", "b"])
    out = replay(trace, "lru", 8, PolicyOptions(), "partitioned")
    a = iso.subset(trace, np.array([0, 1, 2]))
    alone = POLICIES["lru"].hit_blocks(a, 6)
    assert out.hit_blocks[[0, 1, 2]].tolist() == alone.tolist() == [0, 0, 2]
    assert not out.cross.any()


def test_quota_file(tmp_path) -> None:
    trace = trace_of([[1], [2]], ["a", "b"])
    f = tmp_path / "q.csv"
    f.write_text("tenant,share\na,3\nb,1\n")
    assert iso.quotas(trace, f).tolist() == [0.75, 0.25]
    f.write_text("a,1\n")
    with pytest.raises(ValueError, match="no share"):
        iso.quotas(trace, f)


def test_cross_tenant_tokens_are_attributed_to_the_inserting_tenant() -> None:
    # b re-uses a's system prompt (blocks 1, 2), then its own turn; block size 4, 10 tokens.
    trace = build_trace([[1, 2, 3], [1, 2, 4], [1, 2, 4]], [10, 10, 10], ["a", "b", "b"], 4)
    rows = simulate_grid(trace, [Scenario("ceiling", None)], Settings()).hit_rates
    by = {r["tenant"]: r for r in rows}
    assert by["b"]["hit_tokens"] == 8 + 10 and by["b"]["cross_tenant_hit_tokens"] == 8 + 8
    assert by["*"]["cross_tenant_hit_tokens"] == 16


# --- steady state -------------------------------------------------------------------------


def test_mser5_truncates_a_warm_up_ramp() -> None:
    rng = np.random.default_rng(3)
    n = 10_000
    level = np.where(np.arange(n) < 2_000, np.linspace(0, 0.5, n), 0.5)
    hit = (level * 1000 + rng.normal(0, 20, n)).clip(0)
    cut = mser5(hit, np.full(n, 1000.0))
    assert 1_000 <= cut <= 3_000


def test_batch_means_interval_covers_the_estimate() -> None:
    rng = np.random.default_rng(4)
    hit = rng.binomial(100, 0.3, size=5_000).astype(float)
    low, high = batch_means_ci(hit, np.full(5_000, 100.0))  # type: ignore[misc]
    assert low < 0.3 < high and high - low < 0.02


def test_a_cache_that_never_fills_has_no_steady_state() -> None:
    trace = trace_of([[i, i + 1] for i in range(0, 400, 2)], ["t"] * 200)
    rows = simulate_grid(trace, [Scenario("lru", 10_000)], Settings(windows=("steady",))).hit_rates
    fleet = rows[0]
    assert fleet["steady"] is False and fleet["token_hit_rate"] is None and fleet["ci_low"] is None
    assert warm_up(np.zeros(5), np.ones(5), -1, bounded=True).filled is False


# --- time series, outcomes, pins ------------------------------------------------------------


def test_timeseries_buckets_add_up_and_outcomes_cover_every_request() -> None:
    times = np.arange(30) * 20.0  # 10 minutes
    trace = build_trace([[1, 2]] * 30, [8] * 30, ["a", "b"] * 15, 4, times=times)
    tables = simulate_grid(trace, [Scenario("lru", 4)], Settings(bucket_s=60, outcomes=True))
    series = [r for r in tables.arrow()[1].to_pylist() if r["tenant"] == "*"]
    assert len(series) == 10 and sum(r["requests"] for r in series) == 30
    assert sum(r["hit_tokens"] for r in series) == tables.hit_rates[0]["hit_tokens"] == 29 * 8
    outcomes = tables.arrow()[2].to_pylist()
    assert len(outcomes) == 30 and outcomes[0]["first_miss_block"] == 0
    assert outcomes[1]["first_miss_block"] is None and outcomes[1]["hit_tokens"] == 8


def test_pin_top_pins_the_most_shared_prefix_and_keeps_it() -> None:
    # Requests sharing (1, 2) alternate with unrelated two-block requests.
    requests = []
    for i in range(20):
        requests += [[1, 2, 100 + i], [500 + 2 * i, 501 + 2 * i]]
    trace = trace_of(requests, ["t"] * len(requests))
    mask = pins.top_shared(trace, 1)
    assert sorted(trace.hashes[mask].tolist()) == [1, 2]
    # Three blocks: under LRU each unrelated request pushes out block 2 (and the tail), so the
    # next shared request finds only block 1; pinned keeps both.
    lru = POLICIES["lru"].hit_blocks(trace, 3)[2::2]
    pinned = POLICIES["pinned"].hit_blocks(trace, 3, PolicyOptions(pinned=mask))[2::2]
    assert lru.tolist() == [1] * 19 and pinned.tolist() == [2] * 19
    with pytest.raises(ValueError, match="do not fit"):
        POLICIES["pinned"].hit_blocks(trace, 1, PolicyOptions(pinned=mask))


def test_pin_file_pins_prefixes_with_their_ancestors(tmp_path) -> None:
    trace = trace_of([[7, 8, 9], [7, 8, 10]], ["t", "t"])
    f = tmp_path / "pins.txt"
    f.write_text("# the shared prompt\n8\n0xdead  # not in the trace\n")
    assert sorted(trace.hashes[pins.from_file(trace, f)].tolist()) == [7, 8]


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(
        st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 12), min_size=1, max_size=5),
        min_size=1,
        max_size=8,
    ),
    wanted=st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 14), max_size=6),
)
def test_pins_named_by_hash_are_the_blocks_carrying_them_and_their_ancestors(
    requests: list[list[int]], wanted: list[int]
) -> None:
    """Every block whose hash is wanted (duplicates, hashes the trace never looks up, the
    largest hash, none at all), with each block before it in its chain, and nothing else."""
    trace = trace_of(requests, ["t"] * len(requests))
    mask = pins.from_hashes(trace, np.array(wanted, np.uint64))
    named = {b for b in range(trace.n_unique) if int(trace.hashes[b]) in set(wanted)}
    expected = set()
    for b in named:
        while b >= 0 and b not in expected:
            expected.add(b)
            b = int(trace.parent[b])
    assert set(np.flatnonzero(mask).tolist()) == expected


# --- the command line ---------------------------------------------------------------------


def test_simulate_command_with_every_new_option(
    bundled_warehouse: Bundled, tmp_path, capsys
) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    assert (
        main(
            [
                "simulate",
                "--warehouse",
                str(wh),
                "--policy",
                "lru,ttl,pinned,belady",
                "--capacity-gib",
                "4,16",
                "--model",
                "llama-3-8b",
                "--kv-dtype",
                "fp8",
                "--window",
                "all,steady",
                "--ttl",
                "600",
                "--pin-top",
                "1",
                "--isolation",
                "shared,salted",
                "--bucket",
                "10m",
                "--outcomes",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "95% CI" in out
    con = duckdb.connect(str(wh), read_only=True)
    rows = con.execute(
        "SELECT DISTINCT policy, isolation, capacity_blocks, capacity_gib, model, kv_dtype "
        "FROM hit_rates ORDER BY ALL"
    ).fetchall()
    # 4 GiB of fp8 Llama-3-8B KV at 512-token blocks: 4 * 2**30 // (65536 * 512) = 128 blocks
    assert ("lru", "shared", 128, 4.0, "llama-3-8b", "fp8") in rows and len(rows) == 16
    options = {
        p: o
        for p, o in con.execute("SELECT DISTINCT policy, policy_options FROM hit_rates").fetchall()
    }
    assert options["ttl"] == "ttl=600s" and options["pinned"].startswith("pin-top=1 (")
    assert con.execute("SELECT count(*) FROM request_outcomes").fetchone() == (16 * 12_031,)
    assert con.execute(
        "SELECT count(DISTINCT bucket_start) FROM hit_rate_timeseries"
    ).fetchone() == (6,)
    con.close()

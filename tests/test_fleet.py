"""The fleet's fidelity: what must hold between the fleet simulation, the single cache and the
cost model, on generated traces of known structure and on the bundled hour."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.assign import assign, ring, session_keys
from prefixscope.analysis.fleet.caches import tiered_policies
from prefixscope.analysis.fleet.replayed import Pins
from prefixscope.analysis.fleet.routers import ROUTERS, RouterSettings
from prefixscope.analysis.fleet.run import (
    Engine,
    Fleet,
    Tiers,
    Traffic,
    simulate_fleet,
    simulate_replica,
)
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.structure.pins import from_file, top_shared
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.isolation import subset
from prefixscope.analysis.trace.measure import hit_tokens

COST = from_roofline(resolve_model("llama-3-8b"), resolve_gpu("h100"))
ENGINE = Engine(COST)


def sessions_trace(
    n_sessions: int = 60,
    turns: int = 5,
    seed: int = 0,
    block_size: int = 16,
    shared_first: bool = False,
    gap_s: float = 0.5,
) -> tuple[Trace, Traffic]:
    """Conversations: each session's first prompt is its own (or, with ``shared_first``,
    starts with one system block common to all), and every later turn extends the previous
    turn's prompt. Sessions interleave in time. Returns the trace and its traffic (output
    tokens, session ids)."""
    rng = np.random.default_rng(seed)
    events = []
    next_id = 1_000
    for s in range(n_sessions):
        chain = [7] if shared_first else []
        t = float(rng.uniform(0, n_sessions * gap_s))
        for _ in range(turns):
            grow = int(rng.integers(1, 6))
            chain = chain + list(range(next_id, next_id + grow))
            next_id += grow
            events.append((t, s, list(chain), int(rng.integers(0, 40))))
            t += float(rng.exponential(gap_s * 10))
    events.sort(key=lambda e: e[0])
    hashes = [e[2] for e in events]
    trace = build_trace(
        hashes,
        [len(h) * block_size for h in hashes],
        [f"t{e[1] % 3}" for e in events],
        block_size,
        times=[e[0] for e in events],
    )
    traffic = Traffic(np.array([e[3] for e in events], np.int64), [f"s{e[1]}" for e in events])
    return trace, traffic


def single_cache(
    trace: Trace,
    policy: str,
    capacity: int,
    ttl_s: float | None = None,
    pin_top: int = 0,
    pin_file: Path | None = None,
) -> np.ndarray:
    pinned = top_shared(trace, pin_top) if pin_top else None
    if pin_file is not None:
        pinned = from_file(trace, pin_file)
    options = PolicyOptions(ttl_s=ttl_s, pinned=pinned)
    return hit_tokens(trace, POLICIES[policy].hit_blocks(trace, capacity, options))


ONE_REPLICA = [  # (policy, its ttl, its pins)
    ("lru", None, 0), ("fifo", None, 0), ("ttl", 10.0, 0), ("ttl", 60.0, 0),
    ("lfu", None, 0), ("s3fifo", None, 0), ("belady", None, 0), ("pinned", None, 50),
]  # fmt: skip


@pytest.mark.parametrize(("policy", "ttl_s", "pin_top"), ONE_REPLICA)
@pytest.mark.parametrize("router", list(ROUTERS))
def test_one_replica_under_any_router_equals_the_single_cache(
    bundled_trace: Trace, router: str, policy: str, ttl_s: float | None, pin_top: int
) -> None:
    """Every policy of a fleet: kept by the loop (lru, fifo, ttl on its lists, lfu and s3fifo
    on their rows) and replayed per replica (belady, pinned --pin-top), to the token."""
    traffic = Traffic(np.zeros(bundled_trace.n_requests, np.int64))
    pins = Pins(top=pin_top) if pin_top else Pins()
    fleet = Fleet(router, 1, 4_000, policy, ttl_s=ttl_s, pins=pins)
    out = simulate_fleet(bundled_trace, traffic, fleet, ENGINE)
    expected = single_cache(bundled_trace, policy, 4_000, ttl_s, pin_top)
    assert expected.sum() > 0
    np.testing.assert_array_equal(out.hit_tokens, expected)
    lru = single_cache(bundled_trace, "lru", 4_000).sum()
    if ttl_s is not None:  # the idle rule bites: fewer hits than LRU alone at this capacity
        assert expected.sum() < lru
    if policy == "belady":  # the offline optimum beats LRU here
        assert expected.sum() > lru


@pytest.mark.parametrize(
    ("router", "policy"),
    [("session", "lfu"), ("session", "s3fifo"), ("session", "belady"), ("session", "pinned"),
     ("kv-aware", "lfu"), ("kv-aware", "s3fifo"), ("kv-aware", "pinned"), ("cache-aware", "lfu"),
     ("least-loaded", "s3fifo"), ("least-loaded", "pinned")],
)  # fmt: skip
def test_each_replica_is_the_single_cache_of_what_was_routed_to_it(
    router: str, policy: str, tmp_path: Path
) -> None:
    """A replica's cache sees the requests routed to it and nothing else, so its hits are the
    single cache's on that stream, request by request: under a fixed router (belady is
    replayed so), and under a stateful one, which lfu, s3fifo and pinned (a --pin file's
    prefixes, here the system block and the first session's first turn) run in the loop itself."""
    trace, traffic = sessions_trace(shared_first=True)
    pin_file = None
    if policy == "pinned":
        pin_file = tmp_path / "pins.txt"
        pin_file.write_text("7\n1001\n")  # the system block, and session 0's first turn
    pins = Pins(file=str(pin_file)) if pin_file else Pins()
    out = simulate_fleet(trace, traffic, Fleet(router, 3, 30, policy, pins=pins), ENGINE)
    assert len(set(out.replica.tolist())) == 3
    for i in range(3):
        mine = np.flatnonzero(out.replica == i)
        want = single_cache(subset(trace, mine), policy, 30, pin_file=pin_file)
        assert want.sum() > 0
        np.testing.assert_array_equal(out.hit_tokens[mine], want)


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize(
    ("router", "tiers"),
    [("kv-aware", Tiers()), ("cache-aware", Tiers()), ("least-loaded", Tiers()),
     ("kv-aware", Tiers(dram_blocks=20)), ("least-loaded", Tiers(store_blocks=50)),
     ("kv-aware", Tiers(dram_blocks=20, store_blocks=50))],
)  # fmt: skip
def test_the_loops_own_list_is_the_policys_row_operations(
    policy: str, router: str, tiers: Tiers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lru`` and ``fifo`` are row policies, defined by their operations, that a fleet keeps
    on its own list: the same policy registered again under another name runs on its rows by
    those operations (``fleet/_policy_cache.py``), and every request's replica, hits by tier
    and TTFT are the list's, behind a router that reads the caches, over a DRAM tier and the
    store as on HBM alone."""
    trace, traffic = sessions_trace(shared_first=True)
    rows = f"{policy}-rows"
    monkeypatch.setitem(POLICIES, rows, replace(POLICIES[policy], name=rows))  # type: ignore[type-var]
    listed = simulate_fleet(trace, traffic, Fleet(router, 3, 30, policy, tiers=tiers), ENGINE)
    by_ops = simulate_fleet(trace, traffic, Fleet(router, 3, 30, rows, tiers=tiers), ENGINE)
    assert len(set(listed.replica.tolist())) == 3 and listed.hit_tokens.sum() > 0
    lower = listed.source_tokens[:, 1:].sum()
    assert (lower > 0) == (tiers.dram_blocks > 0 or tiers.store_blocks is not None)
    np.testing.assert_array_equal(by_ops.replica, listed.replica)
    np.testing.assert_array_equal(by_ops.source_tokens, listed.source_tokens)
    np.testing.assert_array_equal(by_ops.ttft, listed.ttft)
    np.testing.assert_array_equal(by_ops.filled_at, listed.filled_at)


@pytest.mark.parametrize("policy", [p for p in tiered_policies() if p not in ("lru", "fifo")])
def test_a_row_policy_over_a_dram_tier_keeps_its_hbm_and_adds_the_tiers_hits(policy: str) -> None:
    """Under a fixed routing a replica's HBM holds what it holds without the tier (a block the
    tier serves moves up, as a miss would be inserted), so each request finds at least the
    same run, and the tier and the store serve more on top."""
    trace, traffic = sessions_trace(shared_first=True)
    alone = simulate_fleet(trace, traffic, Fleet("round-robin", 3, 30, policy), ENGINE)
    tiers = Tiers(dram_blocks=20, store_blocks=50)
    over = Fleet("round-robin", 3, 30, policy, tiers=tiers)
    tiered = simulate_fleet(trace, traffic, over, ENGINE)
    np.testing.assert_array_equal(tiered.replica, alone.replica)
    assert (tiered.hit_tokens >= alone.hit_tokens).all()
    assert tiered.source_tokens[:, 1].sum() > 0 and tiered.source_tokens[:, 2].sum() > 0
    assert tiered.hit_tokens.sum() > alone.hit_tokens.sum()
    np.testing.assert_array_equal(tiered.source_tokens.sum(axis=1), tiered.hit_tokens)


def test_a_grid_of_pinned_fleets_reads_its_pin_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fleets over one trace with one ``--pin`` file (a grid's routers and replica counts)
    read and match the file once; another file, or another trace, is read for itself."""
    from prefixscope.analysis.structure import pins as pin_module

    reads: list[str] = []
    real = pin_module.read_hashes

    def counted(path):  # type: ignore[no-untyped-def]
        reads.append(str(path))
        return real(path)

    monkeypatch.setattr(pin_module, "read_hashes", counted)
    trace, traffic = sessions_trace(shared_first=True)
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("7\n1001\n")
    second.write_text("7\n")
    grid = [("session", 3), ("kv-aware", 3), ("least-loaded", 2), ("cache-aware", 4)]
    outs = [simulate_fleet(trace, traffic, Fleet(r, n, 30, "pinned", pins=Pins(file=str(first))),
                           ENGINE) for r, n in grid]  # fmt: skip
    assert reads == [str(first)]
    simulate_fleet(trace, traffic, Fleet("session", 3, 30, "pinned", pins=Pins(file=str(second))),
                   ENGINE)  # fmt: skip
    again, _ = sessions_trace(shared_first=True)
    alone = simulate_fleet(again, traffic, Fleet("session", 3, 30, "pinned",
                                                 pins=Pins(file=str(first))), ENGINE)  # fmt: skip
    assert reads == [str(first), str(second), str(first)]
    np.testing.assert_array_equal(alone.hit_tokens, outs[0].hit_tokens)


@pytest.mark.parametrize("replicas", [2, 5])
def test_a_router_that_sends_everything_to_one_replica_is_one_cache(replicas: int) -> None:
    trace, traffic = sessions_trace()
    routing = np.full(trace.n_requests, replicas - 1, np.int32)
    out = simulate_fleet(
        trace, traffic, Fleet("round-robin", replicas, 40), ENGINE, routing=routing
    )
    np.testing.assert_array_equal(out.hit_tokens, single_cache(trace, "lru", 40))
    assert (out.busy[: replicas - 1] == 0).all() and out.busy[replicas - 1] > 0


@pytest.mark.parametrize("replicas", [3, 4])
def test_session_routing_of_independent_sessions_is_separate_caches(replicas: int) -> None:
    trace, traffic = sessions_trace()
    fleet = Fleet("session", replicas, 30)
    out = simulate_fleet(trace, traffic, fleet, ENGINE)
    routing = assign(trace, "session", replicas, RouterSettings(), traffic.sessions)
    np.testing.assert_array_equal(out.replica, routing)
    for i in range(replicas):
        mine = np.flatnonzero(routing == i)
        alone = single_cache(subset(trace, mine), "lru", 30)
        np.testing.assert_array_equal(out.hit_tokens[mine], alone)
        # the replica's clock, too: it sees nothing but its own stream
        part = simulate_replica(trace, traffic, fleet, ENGINE, mine)
        np.testing.assert_allclose(out.ttft[mine], part.ttft, rtol=1e-12)
        assert out.busy[i] == pytest.approx(part.busy[0], rel=1e-12)


def test_session_routing_sends_a_request_home_unless_home_is_at_its_bound() -> None:
    trace, traffic = sessions_trace(n_sessions=80)
    settings = RouterSettings()
    routing = assign(trace, "session", 4, settings, traffic.sessions)
    points, owner = ring(4, settings.virtual_nodes)
    keys = session_keys(trace, traffic.sessions, settings)
    home = owner[np.searchsorted(points, keys) % len(points)]
    counts = np.zeros(4, np.int64)
    for r in range(trace.n_requests):
        bound = np.ceil(settings.balance_factor * (r + 1) / 4)
        assert counts[routing[r]] < bound
        if routing[r] != home[r]:
            assert counts[home[r]] >= bound  # a spill only when home is full
        counts[routing[r]] += 1
    assert (routing == home).mean() > 0.85
    # the same session id, the same home: a conversation stays unless it spills
    sessions = np.array(traffic.sessions)
    assert all(len(set(home[sessions == s])) == 1 for s in set(traffic.sessions))


@pytest.mark.parametrize("shared_first", [False, True])
def test_kv_aware_without_a_load_term_and_unbounded_caches_reaches_the_ceiling(
    shared_first: bool,
) -> None:
    trace, traffic = sessions_trace(shared_first=shared_first)
    engine = replace(ENGINE, routers=RouterSettings(load_weight=0.0))
    out = simulate_fleet(trace, traffic, Fleet("kv-aware", 4, trace.n_unique), engine)
    ceiling = hit_tokens(trace, POLICIES["ceiling"].hit_blocks(trace, None))
    np.testing.assert_array_equal(out.hit_tokens, ceiling)


@pytest.mark.parametrize("router", list(ROUTERS))
def test_work_is_conserved_and_nothing_starts_before_it_arrives(router: str) -> None:
    trace, traffic = sessions_trace(gap_s=0.01)  # bursts: queues form
    engine = Engine(COST, budget_tokens=64, max_seqs=4)
    out = simulate_fleet(trace, traffic, Fleet(router, 3, 20, load_scale=3.0), engine)
    new = np.maximum(trace.input_tokens - out.hit_tokens, 1)
    assert out.prefill_tokens.sum() == new.sum()
    assert out.decode_tokens.sum() == np.maximum(traffic.output_tokens - 1, 0).sum()
    for i in range(3):  # per replica: what it computed is what was routed to it
        assert out.prefill_tokens[i] == new[out.replica == i].sum()
    assert (out.first_start >= out.arrival).all()
    assert (out.arrival + out.ttft >= out.first_start).all()
    assert (out.done_at >= out.arrival + out.ttft - 1e-12).all()
    # without decodes and with prefills that fit one step, batching only shares a step's
    # fixed cost and weight read: never more work than each prefill alone (a small budget
    # splits prefills into chunks that each pay the weight read, and can cost more)
    quiet = Traffic(np.zeros(trace.n_requests, np.int64))
    assert trace.input_tokens.max() <= ENGINE.budget_tokens
    batched = simulate_fleet(trace, quiet, Fleet(router, 3, 20, load_scale=3.0), ENGINE)
    new = np.maximum(trace.input_tokens - batched.hit_tokens, 1)
    alone = COST.prefill_seconds(new, trace.input_tokens - new).sum()
    assert 0 < batched.busy.sum() <= alone * (1 + 1e-9)


@pytest.mark.parametrize("router", ["round-robin", "least-loaded", "kv-aware"])
def test_without_overlap_busy_time_is_the_sum_of_each_prefill_alone(router: str) -> None:
    """Requests far apart and no decode: each step holds one request's one chunk, so a
    replica's busy time is the cost model's T(new, cached) summed over its requests."""
    trace, traffic = sessions_trace(gap_s=100.0)
    traffic = Traffic(np.zeros(trace.n_requests, np.int64))
    out = simulate_fleet(trace, traffic, Fleet(router, 3, 25), ENGINE)
    new = np.maximum(trace.input_tokens - out.hit_tokens, 1)
    service = COST.prefill_seconds(new, trace.input_tokens - new)
    for i in range(3):
        assert out.busy[i] == pytest.approx(service[out.replica == i].sum(), rel=1e-9)
    np.testing.assert_allclose(out.ttft, service, rtol=1e-9)
    assert out.busy.sum() == pytest.approx(service.sum(), rel=1e-9)


def test_twice_the_load_keeps_fixed_routing_hits_and_only_adds_queueing() -> None:
    trace, traffic = sessions_trace(gap_s=0.05)
    one = simulate_fleet(trace, traffic, Fleet("round-robin", 2, 30), ENGINE)
    two = simulate_fleet(trace, traffic, Fleet("round-robin", 2, 30, load_scale=8.0), ENGINE)
    np.testing.assert_array_equal(one.hit_tokens, two.hit_tokens)
    assert np.percentile(two.ttft, 95) > np.percentile(one.ttft, 95)


@pytest.mark.parametrize("replicas", [4, 8])
def test_affinity_routers_beat_scattering_ones_on_conversations(replicas: int) -> None:
    """On conversations, keeping a session (or its prefix) in one place wins hits; spreading
    requests without regard to their prefix loses them."""
    trace, traffic = sessions_trace(n_sessions=120, turns=6, seed=3)
    rate = {}
    for router in ROUTERS:
        out = simulate_fleet(trace, traffic, Fleet(router, replicas, 60), ENGINE)
        rate[router] = out.hit_tokens.sum() / trace.input_tokens.sum()
    for affinity in ("session", "cache-aware", "kv-aware"):
        for scatter in ("round-robin", "random"):
            assert rate[affinity] > rate[scatter], rate


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (Fleet("nope", 2, 10), "unknown router"),
        (Fleet("round-robin", 0, 10), "replicas must be"),
        (Fleet("round-robin", 65, 10), "replicas must be"),
        (Fleet("round-robin", 2, 0), "at least one block"),
        (Fleet("round-robin", 2, 10, policy="ceiling"), "it is unbounded"),
        (Fleet("kv-aware", 2, 10, policy="belady"), "which a stateful router"),
        (Fleet("round-robin", 2, 10, policy="pinned"), "pinned needs --pin FILE or --pin-top"),
        (Fleet("round-robin", 2, 10, "ttl", ttl_s=5.0, tiers=Tiers(dram_blocks=5)), "HBM alone"),
        (Fleet("round-robin", 2, 10, load_scale=0), "load scale"),
    ],
)
def test_a_bad_configuration_says_what_is_wrong(settings: Fleet, message: str) -> None:
    trace, traffic = sessions_trace(n_sessions=2)
    with pytest.raises(ValueError, match=message):
        simulate_fleet(trace, traffic, settings, ENGINE)


def test_prompts_without_a_whole_block_route_by_session_and_cost_one_token() -> None:
    """A token source's prompt shorter than a block hashes no block; an empty prompt still
    computes one token, at no context."""
    trace = build_trace([[], [], []], [5, 0, 5], ["t"] * 3, 16, times=[0.0, 100.0, 200.0])
    traffic = Traffic(np.zeros(3, np.int64), ["a", "b", "a"])
    out = simulate_fleet(trace, traffic, Fleet("session", 2, 4), ENGINE)
    assert out.replica[0] == out.replica[2]  # one session, one replica
    expected = COST.prefill_seconds(np.array([5.0, 1.0, 5.0]), np.zeros(3))
    np.testing.assert_allclose(out.ttft, expected, rtol=1e-12)

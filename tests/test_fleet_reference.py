"""The compiled fleet loop against its plain-Python reference, request by request, and the
reference against a small case worked by hand."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.replayed import Pins
from prefixscope.analysis.fleet.routers import ROUTERS, RouterSettings, resolve_router
from prefixscope.analysis.fleet.run import (
    UNBOUNDED,
    Engine,
    Fleet,
    FleetOutcome,
    Tiers,
    Traffic,
    simulate_fleet,
)
from prefixscope.analysis.fleet.stepcost import StepCost
from prefixscope.analysis.structure.pins import from_hashes
from prefixscope.analysis.trace.csr import Trace, build_trace
from tests.oracles.fleet import reference_fleet

# Every term nonzero and both knees above one token: chunks and steps fall on both sides of
# them. A step of ~16 tokens takes a few ms, the scale of the arrival gaps below.
COST = StepCost(a=1e-3, b=1e-4, c=2e-6, e=5e-7, f=3e-6, k1=24.0, k2=6.0, source="test")

# Compared request by request (or replica by replica): every array of the outcome, counts
# exactly and seconds within 1e-9.
#: Every per-request and per-replica array of an outcome (a reference never stops early).
#: every field but the miss budget, which the reference does not keep (test_miss_budget.py
#: checks it against the unbounded cache and one hand-made case a part)
FIELDS = [
    f.name
    for f in fields(FleetOutcome)
    if f.name not in ("fleet", "stopped_at", "miss", "why", "view_early")
]


# Arrival gaps (s), from a burst to idle; powers of two, so sums are exact and an arrival can
# fall exactly one eviction interval after the last eviction.
GAPS = [0.0, 0.0, 2**-11, 2**-9, 2**-8, 2**-7, 2**-5, 2**-2]
#: Where the drawn cases' --pin files are written, once per content; gone with the process.
PIN_DIR = Path(tempfile.mkdtemp(prefix="prefixscope-pins-"))
atexit.register(shutil.rmtree, PIN_DIR, ignore_errors=True)


@dataclass
class Case:
    trace: Trace
    traffic: Traffic
    fleet: Fleet
    engine: Engine


@st.composite
def cases(draw, router: str, policy: str) -> Case:  # type: ignore[no-untyped-def]
    """A small fleet on a small trace: prefix-chained requests (a random prefix of an earlier
    request, then new blocks), bursts of arrivals so queues form, tiny caches and trees, and
    now and then a DRAM tier per replica and a shared store, on links from free to slow."""
    bs = draw(st.integers(4, 16))
    n = draw(st.integers(5, 60))
    chains: list[list[int]] = []
    inputs, outputs, times = [], [], []
    fresh, t = 1, 0.0
    for _ in range(n):
        chain: list[int] = []
        if chains and draw(st.booleans()):
            earlier = chains[draw(st.integers(0, len(chains) - 1))]
            chain = earlier[: draw(st.integers(0, len(earlier)))]
        # at least one block in the trace: session_keys fails on a trace without any
        grow = draw(st.integers(0 if chains else 1, 3)) if len(chain) < 8 else 0
        chain = chain + list(range(fresh, fresh + grow))  # a new id: one prefix forever
        fresh += grow
        chains.append(chain)
        # a whole-block prompt (the last-token rule's case), a partial last block, or fewer
        # tokens than the blocks hold (hash-id traces)
        extra = draw(st.sampled_from([0, 0, 1, bs - 1, -1, -bs]))
        inputs.append(max(1, len(chain) * bs + extra))
        outputs.append(draw(st.integers(0, 20)))
        t += draw(st.sampled_from(GAPS))
        times.append(t)
    tenants = [f"t{draw(st.integers(0, 2))}" for _ in range(n)]
    rule = draw(st.sampled_from(["none", "all", "some"]))
    last_token_rule = {
        "none": None,
        "all": [True] * n,
        "some": [draw(st.booleans()) for _ in range(n)],
    }[rule]
    trace = build_trace(chains, inputs, tenants, bs, times, last_token_rule=last_token_rule)
    sessions = None
    if draw(st.booleans()):
        sessions = [draw(st.sampled_from(["a", "b", "c", None])) for _ in range(n)]
    traffic = Traffic(np.array(outputs, np.int64), sessions)
    routers = RouterSettings(
        seed=draw(st.integers(0, 3)),
        session_blocks=draw(st.integers(1, 3)),
        balance_factor=draw(st.sampled_from([1.0, 1.25, 2.0])),
        virtual_nodes=draw(st.integers(1, 8)),
        cache_threshold=draw(st.sampled_from([0.0, 0.3, 0.7, 1.0])),
        balance_abs=draw(st.integers(0, 3)),
        balance_rel=draw(st.sampled_from([1.0, 1.5, 2.0, 3.0])),
        tree_tokens=draw(st.integers(1, 8 * bs)),
        evict_interval_s=draw(st.sampled_from([-1.0, 0.0, 2**-8, 2**-6, 120.0])),
        overlap_weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
        load_weight=draw(st.sampled_from([0.0, 0.25, 1.0])),
    )
    max_seqs = draw(st.integers(1, 4))
    # a token's KV of 1,000 bytes: at these links a copy costs from nothing to far more than
    # recomputing, so both sides of the copy-or-recompute rule are taken
    engine = Engine(
        COST, draw(st.integers(max(8, max_seqs), 64)), max_seqs, routers, kv_bytes_per_token=1e3
    )
    links = st.sampled_from([float("inf"), 1e-3, 1e-2, 1e-1])
    tiers = Tiers(
        dram_blocks=draw(st.sampled_from([0, 0, 1, 3, 8, 20])),
        dram_gbps=draw(links),
        store_blocks=draw(st.sampled_from([None, None, 0, 5, 40, UNBOUNDED])),
        store_gbps=draw(links),
    )
    ttl_s = None
    if policy == "ttl":  # on HBM alone; idle times around the gaps between arrivals
        tiers, ttl_s = Tiers(), draw(st.sampled_from([0.0, 2**-10, 2**-8, 2**-6, 2**-3, 1.0]))
    if policy in ("belady", "pinned"):  # on HBM alone
        tiers = Tiers()
    replayed = policy == "belady"  # under a fixed router or on one replica
    fixed = resolve_router(router).fixed
    capacity, pinned = draw(st.integers(1, 30)), Pins()
    if policy == "pinned":  # a --pin file of some of the trace's prefixes, on every replica
        wanted = sorted({b for chain in chains for b in chain if draw(st.integers(0, 5)) == 0})
        pinned = Pins(file=str(pin_file(wanted)))
        capacity = max(capacity, int(from_hashes(trace, np.array(wanted, np.uint64)).sum()))
    fleet = Fleet(
        router,
        draw(st.integers(1, 5)) if fixed or not replayed else 1,
        capacity,
        policy,
        draw(st.sampled_from([0.5, 1.0, 3.0])),
        tiers=tiers,
        ttl_s=ttl_s,
        pins=pinned,
    )
    return Case(trace, traffic, fleet, engine)


def pin_file(hashes: list[int]) -> Path:
    """A --pin file listing ``hashes``, one per content, in a directory of this run's."""
    path = PIN_DIR / f"pins-{'-'.join(map(str, hashes)) or 'none'}.txt"
    if not path.exists():
        path.write_text("".join(f"{h}\n" for h in hashes))
    return path


def first_difference(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shape: kernel {got.shape}, reference {want.shape}"
    same = agree(got, want)
    at = np.unravel_index(int(np.flatnonzero(~same)[0]), got.shape)
    return f"at {at}: kernel {got[at]!r}, reference {want[at]!r}"


def agree(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    if np.issubdtype(want.dtype, np.floating):
        return np.isclose(got, want, rtol=1e-9, atol=0)
    return got == want


@pytest.mark.parametrize("policy", ["lru", "fifo", "ttl", "lfu", "s3fifo", "belady", "pinned"])
@pytest.mark.parametrize("router", list(ROUTERS))
@settings(max_examples=50, deadline=None)  # 42 cases: 2,100 fleets a run
@given(data=st.data())
def test_the_kernel_matches_the_reference_request_by_request(
    router: str, policy: str, data: st.DataObject
) -> None:
    case = data.draw(cases(router, policy))
    got = simulate_fleet(case.trace, case.traffic, case.fleet, case.engine)
    want = reference_fleet(case.trace, case.traffic, case.fleet, case.engine)
    for name in FIELDS:
        g, w = getattr(got, name), getattr(want, name)
        assert g.shape == w.shape and agree(g, w).all(), f"{name} {first_difference(g, w)}"


# Two replicas, block size 4, budget 8 tokens, max_seqs 2, cost a = 1, b = 0.1, c = 0.01
# (e = f = 0, knees 1): a step costs 1 + 0.1·tokens + 0.01·(each chunk's context + each
# decoder's context). Requests:
#   r0 at t=0:   blocks A B,   8 tokens, 2 out -> replica 0 (both idle: ties start at 0)
#   r1 at t=0:   block  C,     6 tokens, 1 out -> replica 1
#   r2 at t=0.5: blocks A B D, 12 tokens, 1 out -> replica 0 (it caches A B)
# Replica 0, step 1 at 0: r0's 8 tokens at context 0: 1 + 0.8 = 1.8, so r0's TTFT is 1.8; it
#   then decodes one token at context 8 + 1 = 9.
# r2 arrives at 0.5 (replica 0 busy until 1.8): hits A B (8 tokens), prefills 4 after 8.
# Replica 0, step 2 at 1.8: r0's decode (0.01·9) and r2's chunk (0.01·8), 5 tokens:
#   1 + 0.09 + 0.08 + 0.5 = 1.67, ends at 3.47: r0 done, r2's TTFT is 3.47 - 0.5 = 2.97.
# Replica 1, step 1 at 0: r1's 6 tokens: 1 + 0.6 = 1.6, its TTFT and done time.
# Round-robin routes so by rule. Least-loaded: r0 ties at 0 (from r0 mod 2 = 0), r1 finds 8
# tokens queued on replica 0, r2 both queues empty at 0.5 (a tie, from r2 mod 2 = 0).
# Cache-aware: r0 and r1 match nothing and go to the smallest tree (0, then 1); r2 matches
# A B in replica 0's tree, 2 of 3 blocks >= 0.3.
HAND = {
    "replica": [0, 1, 0],
    "hit_blocks": [0, 0, 2],
    "hit_tokens": [0, 0, 8],
    "ttft": [1.8, 1.6, 2.97],
    "first_start": [0.0, 0.0, 1.8],
    "done_at": [3.47, 1.6, 3.47],
    "busy": [3.47, 1.6],
    "steps": [2, 1],
    "prefill_tokens": [12, 6],
    "decode_tokens": [1, 0],
    "filled_at": [2, -1],  # capacity 3: replica 0 holds A B D after r2
    "drained_at": [3.47, 1.6],
}


@pytest.mark.parametrize("simulate", [reference_fleet, simulate_fleet], ids=["ref", "kernel"])
@pytest.mark.parametrize("router", ["round-robin", "least-loaded", "cache-aware"])
def test_the_reference_matches_a_case_worked_by_hand(
    router: str, simulate: Callable[..., FleetOutcome]
) -> None:
    trace = build_trace([[1, 2], [3], [1, 2, 4]], [8, 6, 12], ["t"] * 3, 4, [0.0, 0.0, 0.5])
    traffic = Traffic(np.array([2, 1, 1], np.int64))
    cost = StepCost(a=1.0, b=0.1, c=0.01, e=0.0, f=0.0, k1=1.0, k2=1.0, source="hand")
    engine = Engine(cost, budget_tokens=8, max_seqs=2)
    out = simulate(trace, traffic, Fleet(router, 2, 3), engine)
    for name, want in HAND.items():
        np.testing.assert_allclose(getattr(out, name), want, rtol=1e-12, err_msg=name)

"""Eviction policies: one conformance suite for all, and agreement with the references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from prefixscope.analysis.policies import POLICIES, PolicyOptions, RowPolicy, row_policies
from prefixscope.analysis.trace.csr import Trace, build_trace
from tests.oracles.policies import reference_hit_blocks, reference_replay


def make_trace(
    requests: list[list[int]],
    tenants: list[str] | None = None,
    bs: int = 4,
    times: list[float] | None = None,
    sessions: list[int | None] | None = None,
) -> Trace:
    names = None if sessions is None else [None if s is None else f"s{s}" for s in sessions]
    return build_trace(
        requests,
        [len(r) * bs for r in requests],
        tenants or ["t"] * len(requests),
        bs,
        times,
        sessions=names,
    )


def options(trace: Trace) -> PolicyOptions:
    """Settings under which every policy runs: a 5 s ttl, nothing pinned."""
    return PolicyOptions(ttl_s=5.0, pinned=np.zeros(trace.n_unique, dtype=bool))


def run(name: str, trace: Trace, capacity: int) -> np.ndarray:
    cap = capacity if POLICIES[name].bounded else None
    return POLICIES[name].hit_blocks(trace, cap, options(trace))


def brute_force_lru(requests: list[list[int]], capacity: int) -> list[int]:
    """LRU read straight off its definition: after each request the cache is the `capacity`
    blocks with the largest key (last request, -position of that use)."""
    key: dict[int, tuple[int, int]] = {}
    cache: set[int] = set()
    hits = []
    for r, blocks in enumerate(requests):
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        hits.append(k)
        for pos in reversed(range(len(blocks))):
            key[blocks[pos]] = (r, -pos)
        cache |= set(blocks)
        cache = set(sorted(cache, key=key.__getitem__)[-capacity:])
    return hits


def prefix_chains(n_roots: int = 3, depth: int = 6, max_requests: int = 40):  # type: ignore[no-untyped-def]
    """Requests that are prefix-chained, as real block hashes are: a request is a path in a
    random tree, so equal ids always sit after equal prefixes."""

    @st.composite
    def build(draw):  # type: ignore[no-untyped-def]
        paths = draw(
            st.lists(
                st.lists(st.integers(0, 2), min_size=1, max_size=depth),
                min_size=1,
                max_size=max_requests,
            )
        )
        roots = draw(
            st.lists(st.integers(0, n_roots - 1), min_size=len(paths), max_size=len(paths))
        )
        ids: dict[tuple[int, ...], int] = {}
        out = []
        for root, path in zip(roots, paths, strict=True):
            prefix: tuple[int, ...] = (root,)
            chain = []
            for step in path:
                prefix = (*prefix, step)
                chain.append(ids.setdefault(prefix, len(ids)))
            out.append(chain)
        return out

    return build()


# Any block lists at all, including ones a chained hash cannot produce (repeats, reorders), and
# requests without a full block (a short prompt from a token source).
arbitrary = st.lists(st.lists(st.integers(0, 9), min_size=0, max_size=6), min_size=1, max_size=30)


@pytest.mark.parametrize("name", sorted(POLICIES))
class TestConformance:
    """What every policy must satisfy, whatever its eviction rule."""

    @settings(max_examples=60, deadline=None)
    @given(requests=prefix_chains(), capacity=st.integers(1, 12))
    def test_hits_are_a_leading_run_no_longer_than_the_request(self, name, requests, capacity):
        trace = make_trace(requests)
        hits = run(name, trace, capacity)
        assert hits.dtype == np.int32 and hits.shape == (len(requests),)
        assert np.all((hits >= 0) & (hits <= trace.blocks_per_request))
        assert hits[0] == 0  # nothing is cached before the first request

    @settings(max_examples=60, deadline=None)
    @given(requests=prefix_chains(), capacity=st.integers(1, 12))
    def test_never_beats_the_ceiling_and_is_deterministic(self, name, requests, capacity):
        trace = make_trace(requests)
        hits = run(name, trace, capacity)
        ceiling = POLICIES["ceiling"].hit_blocks(trace, None)
        assert np.all(hits <= ceiling)
        assert np.array_equal(hits, run(name, trace, capacity))

    def test_a_cache_that_holds_everything_is_the_ceiling(self, name):
        requests = [[0, 1, 2], [0, 1, 3], [4], [0, 1, 2, 5], [4, 6], [0, 7]]
        trace = make_trace(requests)
        hits = POLICIES[name].hit_blocks(
            trace,
            trace.n_unique if POLICIES[name].bounded else None,
            PolicyOptions(ttl_s=1e9, pinned=np.zeros(trace.n_unique, dtype=bool)),
        )
        assert hits.tolist() == [0, 2, 0, 3, 1, 1]

    def test_bounded_policies_refuse_a_missing_capacity(self, name):
        trace = make_trace([[0, 1]])
        if POLICIES[name].bounded:
            with pytest.raises(ValueError):
                POLICIES[name].hit_blocks(trace, None, options(trace))


@settings(max_examples=300, deadline=None)
@given(requests=st.one_of(prefix_chains(), arbitrary), capacity=st.integers(1, 15))
def test_compiled_lru_matches_both_references(requests, capacity) -> None:
    trace = make_trace(requests)
    hits = POLICIES["lru"].hit_blocks(trace, capacity).tolist()
    assert hits == reference_hit_blocks("lru", requests, capacity)
    assert hits == brute_force_lru(requests, capacity)


@settings(max_examples=150, deadline=None)
@given(
    requests=st.one_of(prefix_chains(), arbitrary),
    capacity=st.integers(1, 12),
    data=st.data(),
)
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_matches_its_reference_request_by_request(name, requests, capacity, data):
    n = len(requests)
    tenants = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    gaps = data.draw(st.lists(st.floats(0, 4), min_size=n, max_size=n))
    times = list(np.cumsum(gaps) - gaps[0])
    trace = make_trace(requests, [str(t) for t in tenants], times=times)
    ids = sorted({b for r in requests for b in r})
    pins = frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=2)) if ids else [])
    assume(name != "pinned" or len(pins) <= capacity)  # pins that do not fit are refused
    mask = np.isin(trace.hashes, list(pins))
    sessions = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=n, max_size=n))
    trace = make_trace(requests, [str(t) for t in tenants], times=times, sessions=sessions)
    got = POLICIES[name].replay(
        trace,
        capacity if POLICIES[name].bounded else None,
        PolicyOptions(ttl_s=3.0, pinned=mask),
    )
    want = reference_replay(
        name, requests, capacity, tenants, times, ttl=3.0, pinned=pins, sessions=sessions
    )
    assert got.hit_blocks.tolist() == want.hit_blocks
    # an empty cross array means the trace has one tenant: no hit can cross tenants
    assert (got.cross.tolist() or [False] * trace.n_lookups) == want.cross
    if len(trace.tenants) == 1:
        assert not any(want.cross)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_owners_past_a_byte_of_tenants_keep_every_tenant_apart(name) -> None:
    """A log of 300 tenants keeps its owners in int32 (``rows.owners``): tenant ``a + 256``
    caches a chain, then tenant ``a`` hits it, a cross-tenant hit that owners kept in a byte
    would take for the tenant's own (the codes are equal modulo 256)."""
    requests, tenants = [], []
    for a in range(300):
        if a < 44:  # codes a + 256 reach 299: 300 tenants in all
            requests += [[1000 + 3 * a, 1001 + 3 * a, 1002 + 3 * a]] * 2
            tenants += [a + 256, a]
        elif a < 256:
            requests.append([5000 + a])
            tenants.append(a)
    times = [float(r) for r in range(len(requests))]
    trace = make_trace(requests, [f"{t:03d}" for t in tenants], times=times)
    assert len(trace.tenants) == 300 and trace.tenant_codes.tolist() == tenants
    policy = POLICIES[name]
    capacity = 10 * len(requests)  # nothing leaves: every second request of a pair hits
    got = policy.replay(
        trace,
        capacity if policy.bounded else None,
        PolicyOptions(ttl_s=1e9, pinned=np.zeros(trace.n_unique, dtype=bool)),
    )
    want = reference_replay(name, requests, capacity, tenants, times, ttl=1e9)
    assert got.hit_blocks.tolist() == want.hit_blocks
    assert got.cross.tolist() == want.cross
    second = [p for r in range(1, 88, 2) for p in range(3 * r, 3 * r + 3)]
    assert all(want.cross[p] for p in second)


@settings(max_examples=200, deadline=None)
@given(requests=st.one_of(prefix_chains(), arbitrary))
def test_vectorized_ceiling_matches_the_reference(requests) -> None:
    trace = make_trace(requests)
    assert POLICIES["ceiling"].hit_blocks(trace, None).tolist() == reference_hit_blocks(
        "ceiling", requests, None
    )


@settings(max_examples=100, deadline=None)
@given(requests=prefix_chains(), capacity=st.integers(1, 14))
def test_lru_never_loses_hits_when_capacity_grows(requests, capacity) -> None:
    trace = make_trace(requests)
    smaller = POLICIES["lru"].hit_blocks(trace, capacity)
    larger = POLICIES["lru"].hit_blocks(trace, capacity + 1)
    assert np.all(larger >= smaller)


# Small cases with the state drawn out: recency list, least recent (next victim) on the left.
@pytest.mark.parametrize(
    ("requests", "capacity", "hits"),
    [
        # [a b c]          -> c b a          (deepest first, so c is the next victim)
        # [a b d] cap 3    -> a b hit; evict c; -> d b a
        ([[0, 1, 2], [0, 1, 3]], 3, [0, 2]),
        # cap 2: after [a b c] only a b stay (c, the deepest, goes); [a b c] again: a b hit
        ([[0, 1, 2], [0, 1, 2]], 2, [0, 2]),
        # cap 1: only the root survives; a request longer than the cache still hits its root
        ([[0, 1, 2], [0, 1, 2]], 1, [0, 1]),
        # cap 2: [a b c] leaves b a; x comes in and the older chain loses its tail: a x
        ([[0, 1, 2], [9], [0, 1, 2]], 2, [0, 0, 1]),
        # cap 3: [a b c] -> c b a; x evicts only c: b a x; then a b hit again
        ([[0, 1, 2], [9], [0, 1, 2]], 3, [0, 0, 2]),
        # a block after the first miss never counts, even if it is cached
        ([[0, 1], [5, 1]], 4, [0, 0]),
    ],
)
def test_lru_worked_examples(requests, capacity, hits) -> None:
    assert POLICIES["lru"].hit_blocks(make_trace(requests), capacity).tolist() == hits
    assert reference_hit_blocks("lru", requests, capacity) == hits


@settings(max_examples=80, deadline=None)
@given(
    requests=prefix_chains(n_roots=2, depth=5, max_requests=150),
    capacity=st.integers(1, 25),
    data=st.data(),
)
@pytest.mark.parametrize("name", ["lfu", "belady"])
def test_long_traces_match_the_reference(name, requests, capacity, data):
    """Long traces over few roots: use counts climb high and change bucket many times (lfu),
    leaves are re-keyed, replaced at the heap's root and pushed back (belady)."""
    tenants = data.draw(st.lists(st.integers(0, 1), min_size=len(requests), max_size=150))
    tenants = tenants[: len(requests)]
    trace = make_trace(requests, [str(t) for t in tenants])
    got = POLICIES[name].replay(trace, capacity, PolicyOptions())
    want = reference_replay(name, requests, capacity, tenants)
    assert got.hit_blocks.tolist() == want.hit_blocks
    assert (got.cross.tolist() or [False] * trace.n_lookups) == want.cross


# LFU with its counts drawn out: block(uses), the next victim on the left.
@pytest.mark.parametrize(
    ("requests", "capacity", "hits"),
    [
        # [a] [a] -> a(1); [b] -> b(0) a(1); [c] -> b(0) c(0) a(1): b goes, the least recent of
        # the count 0; [b] misses (LRU would have kept b and evicted a) -> c(0) b(0) a(1): c goes
        ([[0], [0], [1], [2], [1], [2]], 2, [0, 1, 0, 0, 0, 0]),
        # a chain's blocks share a count and the deepest is least recent: [a b] [a b] -> b(1)
        # a(1); [x] -> x(0) b(1) a(1); cap 2 evicts x; [a b] hits both
        ([[0, 1], [0, 1], [9], [0, 1]], 2, [0, 2, 0, 2]),
        # three counts at once: [a] [a] [a] [b] [b] -> b(1) a(2); [c] -> c(0) b(1) a(2): c
        # goes; [d] likewise; b and a stay, so [b] hits
        ([[0], [0], [0], [1], [1], [2], [3], [1]], 2, [0, 1, 1, 0, 1, 0, 0, 1]),
    ],
)
def test_lfu_worked_examples(requests, capacity, hits) -> None:
    assert POLICIES["lfu"].hit_blocks(make_trace(requests), capacity).tolist() == hits
    assert reference_hit_blocks("lfu", requests, capacity) == hits


def sorted_next_uses(blocks: np.ndarray, request: np.ndarray, n_requests: int) -> np.ndarray:
    """Next uses by a sort of every lookup (by block, then request): runs of equal (block,
    request) are one use, and a run's next use is the request of the block's next run."""
    order = np.lexsort((request, blocks))
    b, r = blocks[order], request[order]
    starts = np.r_[True, (b[1:] != b[:-1]) | (r[1:] != r[:-1])] if len(b) else np.zeros(0, bool)
    run = np.cumsum(starts) - 1
    run_b, run_r = b[starts], r[starts]
    same_block_next = np.r_[run_b[1:] == run_b[:-1], False] if len(run_b) else run_b.astype(bool)
    run_next = np.where(same_block_next, np.r_[run_r[1:], n_requests], n_requests)
    out = np.empty(len(order), dtype=np.int64)
    out[order] = run_next[run]
    return out


@settings(max_examples=150, deadline=None)
@given(requests=st.one_of(prefix_chains(), arbitrary))
def test_next_uses_of_the_backward_scan_are_those_of_a_sort(requests) -> None:
    """``Trace.next_use`` (Belady's keys, one backward scan) against a sort of every lookup,
    repeats within a request included."""
    trace = make_trace(requests)
    want = sorted_next_uses(trace.blocks, trace.request_of_lookup, trace.n_requests)
    assert trace.next_use.tolist() == want.tolist()


# S3-FIFO when M holds only blocks in use: [a0..a31] fills a cache of 32; [a0..a30 b31..b78]
# shares 31 blocks; evicting down to 32 leaves S below its share (3) with M all in use (each of
# a0..a30 has a cached child), so S must give its victim anyway.
S3FIFO_STARVED = ([list(range(32)), [*range(31), *range(100, 148)]], 32)


@pytest.mark.timeout(60, method="thread")  # a regression loops inside compiled code
def test_s3fifo_evicts_from_s_below_its_share_when_m_has_nothing_to_give() -> None:
    requests, capacity = S3FIFO_STARVED
    hits = POLICIES["s3fifo"].hit_blocks(make_trace(requests), capacity).tolist()
    assert hits == reference_hit_blocks("s3fifo", requests, capacity) == [0, 31]


@settings(max_examples=60, deadline=None)
@given(
    requests=prefix_chains(n_roots=2, depth=30, max_requests=12),
    capacity=st.integers(1, 20),
)
@pytest.mark.timeout(120, method="thread")
def test_s3fifo_matches_its_reference_on_requests_longer_than_the_cache(requests, capacity):
    got = POLICIES["s3fifo"].hit_blocks(make_trace(requests), capacity).tolist()
    assert got == reference_hit_blocks("s3fifo", requests, capacity)


#: The row policies that replay a single cache by a fast path of their own, not their
#: operations' loop (``rows.RowPolicy._run``).
FAST_PATHS = [n for n, p in row_policies().items() if type(p)._run is not RowPolicy._run]


def test_lru_and_fifo_replay_by_their_fast_paths() -> None:
    assert {"lru", "fifo"} <= set(FAST_PATHS)


@pytest.mark.parametrize("name", FAST_PATHS)
@settings(max_examples=150, deadline=None)
@given(
    requests=st.one_of(prefix_chains(), arbitrary),
    capacity=st.integers(1, 40),
    data=st.data(),
)
def test_a_fast_path_equals_its_row_operations(name, requests, capacity, data) -> None:
    """A policy's fast path (``lru``'s touch log, ``fifo``'s ring) against the loop over its
    row operations, the ones that define it and that the fleet calls: hits, cross-tenant
    lookups and when the cache filled, at capacities up to past every distinct block."""
    tenants = data.draw(st.lists(st.integers(0, 2), min_size=len(requests), max_size=len(requests)))
    trace = make_trace(requests, [str(t) for t in tenants])
    policy = POLICIES[name]
    fast = policy.replay(trace, capacity, PolicyOptions())
    hits, cross, filled_at = RowPolicy._run(policy, trace, capacity, PolicyOptions())
    assert fast.hit_blocks.tolist() == hits.tolist()
    assert fast.cross.tolist() == cross.tolist()
    assert fast.filled_at == filled_at
    # asked for hits alone, it keeps no owners: the same hits, no cross-tenant lookups
    alone = policy.replay(trace, capacity, PolicyOptions(cross=False))
    assert alone.hit_blocks.tolist() == hits.tolist() and alone.cross.size == 0


def test_belady_discards_and_compacts_superseded_heap_entries() -> None:
    """A leaf re-keyed at every request leaves an entry behind each time: the heap fills with
    superseded entries, is compacted (several times here), and its victims stay Belady's."""
    requests = ([[0, 1]] * 40 + [[0, 2], [3]]) * 3 + [[0, 1, 4], [0, 2], [3]]
    for capacity in (1, 2, 3, 4):
        hits = POLICIES["belady"].hit_blocks(make_trace(requests), capacity).tolist()
        assert hits == reference_replay("belady", requests, capacity).hit_blocks


@settings(max_examples=80, deadline=None)
@given(
    requests=prefix_chains(n_roots=3, depth=12, max_requests=40),
    capacity=st.integers(1, 25),
    data=st.data(),
)
def test_pinned_on_the_touch_log_equals_the_linked_list_with_pins(requests, capacity, data):
    """``pinned`` runs on the fast touch-log LRU; the linked-list kernel keeps pins its own way
    (never in the list): both give the same hits and the same cross-tenant lookups."""
    from prefixscope.analysis.policies import _kernels

    n = len(requests)
    tenants = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    trace = make_trace(requests, [str(t) for t in tenants])
    pins = np.array(
        data.draw(st.lists(st.booleans(), min_size=trace.n_unique, max_size=trace.n_unique)),
        dtype=np.bool_,
    )
    assume(int(pins.sum()) <= capacity)
    got = POLICIES["pinned"].replay(trace, capacity, PolicyOptions(pinned=pins))
    hits, cross, _ = _kernels.lru(
        trace.offsets,
        trace.blocks,
        trace.tenant_codes,
        trace.times,
        trace.n_unique,
        capacity,
        -1.0,
        pins,
    )
    assert got.hit_blocks.tolist() == hits.tolist()
    assert (got.cross.tolist() or [False] * trace.n_lookups) == cross.tolist()


@settings(max_examples=80, deadline=None)
@given(
    requests=prefix_chains(n_roots=3, depth=12, max_requests=40),
    capacity=st.integers(1, 25),
    data=st.data(),
)
def test_pinned_under_many_pin_sets_in_one_pass_equals_one_replay_each(requests, capacity, data):
    """Many pin sets in one pass (structure's per-prefix pins): each row is the ``pinned``
    replay under that set alone; the empty set is ``lru``. Small capacities compact the shared
    log often, with every variant's head at its own place."""
    from prefixscope.analysis.policies.lru import pinned_hit_blocks_many

    trace = make_trace(requests)
    ids = st.lists(st.integers(0, trace.n_unique - 1), max_size=min(capacity, 6), unique=True)
    sets = [np.array(s, np.int64) for s in data.draw(st.lists(ids, min_size=1, max_size=5))]
    got = pinned_hit_blocks_many(trace, capacity, sets)
    assert got.shape == (len(sets), trace.n_requests)
    for row, ids_ in zip(got, sets, strict=True):
        mask = np.zeros(trace.n_unique, np.bool_)
        mask[ids_] = True
        want = POLICIES["pinned"].hit_blocks(trace, capacity, PolicyOptions(pinned=mask))
        assert row.tolist() == want.tolist()
    plain = POLICIES["lru"].hit_blocks(trace, capacity)
    assert pinned_hit_blocks_many(trace, capacity, [np.zeros(0, np.int64)])[0].tolist() == (
        plain.tolist()
    )


def test_pin_sets_that_do_not_fit_are_refused() -> None:
    from prefixscope.analysis.policies.lru import pinned_hit_blocks_many

    trace = make_trace([[0, 1, 2], [0, 3]])
    with pytest.raises(ValueError, match="do not fit"):
        pinned_hit_blocks_many(trace, 2, [np.array([0, 1, 2])])


@settings(max_examples=300, deadline=None)
@given(
    requests=st.one_of(prefix_chains(max_requests=60), arbitrary),
    capacity=st.integers(1, 12),
    data=st.data(),
)
@pytest.mark.parametrize("name", ["session", "liveness"])
def test_session_policies_match_their_reference_over_minutes(name, requests, capacity, data):
    """Gaps of up to two minutes, so that sessions outlive their patience (60 s at least) and
    liveness tells gone sessions from quiet ones."""
    n = len(requests)
    gaps = data.draw(st.lists(st.sampled_from([0.0, 1.0, 5.0, 30.0, 61.0, 120.0]), min_size=n,
                              max_size=n))  # fmt: skip
    times = list(np.cumsum(gaps) - gaps[0])
    sessions = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=n, max_size=n))
    tenants = data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    trace = make_trace(requests, [str(t) for t in tenants], times=times, sessions=sessions)
    got = POLICIES[name].replay(trace, capacity, PolicyOptions())
    want = reference_replay(name, requests, capacity, tenants, times, sessions=sessions)
    assert got.hit_blocks.tolist() == want.hit_blocks
    assert (got.cross.tolist() or [False] * trace.n_lookups) == want.cross
    assert got.filled_at == want.filled_at


@pytest.mark.parametrize(
    ("name", "hits"),
    [
        # B comes back after 200 s (patience 400 s); A, in a tool loop, after 5 s (patience
        # 60 s) and is then quiet 85 s. When C needs room, session and LRU evict B, the less
        # recently active; liveness presumes A gone and evicts it, so B hits when it returns.
        ("session", [0, 2, 0, 2, 0, 0]),
        ("lru", [0, 2, 0, 2, 0, 0]),
        ("liveness", [0, 2, 0, 2, 0, 2]),
    ],
)
def test_liveness_evicts_the_session_that_outlived_its_patience(name, hits) -> None:
    requests = [[5, 6], [5, 6], [1, 2], [1, 2], [8, 9], [5, 6]]
    sessions = [1, 1, 0, 0, 2, 1]
    times = [0.0, 200.0, 210.0, 215.0, 300.0, 301.0]
    trace = make_trace(requests, times=times, sessions=sessions)
    got = POLICIES[name].replay(trace, 4, PolicyOptions()).hit_blocks.tolist()
    if name != "lru":
        assert got == reference_replay(name, requests, 4, times=times, sessions=sessions).hit_blocks
    assert got == hits


def test_slices_of_a_trace_keep_each_requests_session() -> None:
    from prefixscope.analysis.trace.isolation import subset
    from prefixscope.analysis.trace.tail import span

    trace = make_trace([[1], [2], [3], [4]], sessions=[0, None, 1, 0])
    assert trace.sessions is not None and trace.sessions.tolist()[1] == -1
    assert subset(trace, np.array([0, 3])).sessions.tolist() == [trace.sessions[0]] * 2
    assert span(trace, 1, 3).sessions.tolist() == trace.sessions[1:3].tolist()
    assert make_trace([[1], [2]]).sessions is None
    assert make_trace([[1], [2]], sessions=[None, None]).sessions is None


def test_a_sampled_trace_keeps_each_requests_session() -> None:
    from prefixscope.analysis.curves.sampling import sample_trace

    requests = [[i, 100 + i] for i in range(40)]
    trace = make_trace(requests, sessions=[i % 3 if i % 5 else None for i in range(40)])
    sample = sample_trace(trace, 0.5)
    assert sample.sessions is not None and 0 < sample.n_requests < 40
    # the kept requests' sessions, matched by their first block's hash
    first = {int(trace.hashes[trace.blocks[trace.offsets[r]]]): r for r in range(40)}
    kept = [
        first[int(sample.hashes[sample.blocks[sample.offsets[r]]])]
        for r in range(sample.n_requests)
    ]
    named = [trace.sessions[r] for r in kept]
    # equal sessions stay equal, a request without one stays without
    assert [(s < 0) for s in sample.sessions] == [(s < 0) for s in named]
    pairs = {(int(a), int(b)) for a, b in zip(sample.sessions, named, strict=True) if a >= 0}
    assert len({a for a, _ in pairs}) == len(pairs) == len({b for _, b in pairs})

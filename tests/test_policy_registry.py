"""Adding a policy is one module and one registry line (docs/simulation.md, "Adding a policy"):
the docs' own CLOCK module, registered by one line, runs in ``simulate``, ``curve``, ``fleet``
and ``plan``; its hits equal a plain-Python CLOCK's request by request, a fleet of one replica
equals ``simulate``, and each replica behind a stateful router is the single cache of what it
was routed."""

from __future__ import annotations

import importlib.util
import sys
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analysis.fleet.caches import fleet_policies
from prefixscope.analysis.fleet.run import Fleet, simulate_fleet
from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.policies.rows import RowPolicy
from prefixscope.analysis.trace.isolation import subset
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.validate.reported import Reported
from prefixscope.analysis.validate.tables import validate
from prefixscope.cli import main
from prefixscope.synthetic_gateway import Draft, EngineCache
from tests.conftest import Bundled
from tests.test_fleet import ENGINE, sessions_trace, single_cache
from tests.test_policies import arbitrary, make_trace, prefix_chains
from tests.test_validate import WORKLOAD, fleet_row, validated

DOCS = Path(__file__).resolve().parents[1] / "docs" / "simulation.md"


def example_source() -> str:
    """The module of the docs' worked example, as written there."""
    section = DOCS.read_text().split("## Adding a policy", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def clock_module(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    path = tmp_path_factory.mktemp("policy") / "clock_example.py"
    path.write_text(example_source())
    spec = importlib.util.spec_from_file_location("clock_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["clock_example"] = module  # numba reads a module's globals by its name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def clock(clock_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> RowPolicy:
    """The registry line, for this test only."""
    monkeypatch.setitem(POLICIES, "clock", clock_module.Clock())
    return POLICIES["clock"]  # type: ignore[return-value]


def plain_clock(
    requests: Sequence[Sequence[int]], capacity: int, tenants: Sequence[int]
) -> tuple[list[int], list[bool]]:
    """CLOCK read off its definition, one request at a time: the ring in insertion order with
    a reference bit each; a hit sets the bit; while over capacity the head leaves, unless its
    bit is set: then it goes to the tail with the bit cleared."""
    ring: OrderedDict[int, bool] = OrderedDict()
    owner: dict[int, int] = {}
    hits, cross = [], []
    for blocks, tenant in zip(requests, tenants, strict=True):
        k = 0
        while k < len(blocks) and blocks[k] in ring:
            k += 1
        hits.append(k)
        cross += [owner[b] != tenant for b in blocks[:k]] + [False] * (len(blocks) - k)
        for b in reversed(blocks):  # deepest first
            if b in ring:
                ring[b] = True
            else:
                ring[b] = False
                owner[b] = tenant
        while len(ring) > capacity:
            b, referenced = ring.popitem(last=False)
            if referenced:
                ring[b] = False
    return hits, cross


def test_the_example_is_a_row_policy_that_every_command_lists(clock: RowPolicy) -> None:
    assert isinstance(clock, RowPolicy) and clock.bounded
    assert "clock" in fleet_policies()


@settings(max_examples=150, deadline=None)
@given(
    requests=st.one_of(prefix_chains(), arbitrary),
    capacity=st.integers(1, 12),
    data=st.data(),
)
def test_its_replay_is_clock_request_by_request(
    clock_module: ModuleType, requests: list[list[int]], capacity: int, data: st.DataObject
) -> None:
    n = len(requests)
    tenants = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    trace = make_trace(requests, [str(t) for t in tenants])
    got = clock_module.Clock().replay(trace, capacity, PolicyOptions())
    hits, cross = plain_clock(requests, capacity, tenants)
    assert got.hit_blocks.tolist() == hits
    assert (got.cross.tolist() or [False] * trace.n_lookups) == cross


def test_it_is_neither_lru_nor_fifo(clock: RowPolicy) -> None:
    """A hit saves a block from FIFO's eviction; a second chance is not LRU's order: a block
    just inserted, unreferenced, leaves before two referenced ones."""
    cases = [  # capacity 2; the last request's hit under clock, lru, fifo
        ([[1], [2], [1], [3], [1]], (1, 1, 0)),
        ([[1], [2], [1], [2], [3], [1]], (1, 0, 0)),
    ]
    for requests, want in cases:
        trace = make_trace(requests)
        got = [POLICIES[p].hit_blocks(trace, 2).tolist()[-1] for p in ("clock", "lru", "fifo")]
        assert tuple(got) == want


@pytest.mark.parametrize("router", ["round-robin", "kv-aware", "least-loaded"])
def test_in_a_fleet_each_replica_is_the_single_cache_of_its_requests(
    clock: RowPolicy, router: str
) -> None:
    trace, traffic = sessions_trace(shared_first=True)
    one = simulate_fleet(trace, traffic, Fleet(router, 1, 30, "clock"), ENGINE)
    np.testing.assert_array_equal(one.hit_tokens, single_cache(trace, "clock", 30))
    out = simulate_fleet(trace, traffic, Fleet(router, 3, 30, "clock"), ENGINE)
    assert len(set(out.replica.tolist())) == 3
    for i in range(3):
        mine = np.flatnonzero(out.replica == i)
        want = single_cache(subset(trace, mine), "clock", 30)
        assert want.sum() > 0
        np.testing.assert_array_equal(out.hit_tokens[mine], want)


def test_every_command_takes_it(  # noqa: ANN001
    clock: RowPolicy, bundled_warehouse: Bundled, tmp_path, capsys
) -> None:
    """simulate, curve, fleet (one replica: equal to simulate; two over a DRAM tier) and plan,
    on the bundled hour; the plan's words name it by its label."""
    wh = str(bundled_warehouse.copy_to(tmp_path))
    assert main(["simulate", "--warehouse", wh, "--policy", "clock,lru",
                 "--capacity-blocks", "400,1600"]) == 0  # fmt: skip
    assert main(["curve", "--warehouse", wh, "--policy", "clock",
                 "--capacity-blocks", "1600", "--points", "2"]) == 0  # fmt: skip
    assert main(["fleet", "--warehouse", wh, "--replicas", "1", "--router", "kv-aware",
                 "--capacity-blocks", "1600", "--policy", "clock"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["plan", "--warehouse", wh]) == 0
    words = capsys.readouterr().out
    with duckdb.connect(wh, read_only=True) as con:
        simulated = dict(con.execute(
            "SELECT policy, hit_tokens FROM latest_hit_rates WHERE capacity_blocks = 1600 "
            "AND tenant = '*' AND measure_window = 'all'"
        ).fetchall())  # fmt: skip
        curve = con.execute(
            "SELECT hit_tokens FROM latest_mrc WHERE policy = 'clock' AND capacity_blocks = 1600"
            " AND tenant = '*' AND measure_window = 'all'"
        ).fetchone()
        fleet = con.execute(
            "SELECT hit_tokens FROM latest_fleet_hit_rates WHERE policy = 'clock' "
            "AND tenant = '*' AND measure_window = 'all'"
        ).fetchone()
        planned = con.execute("SELECT DISTINCT policy FROM latest_plan").fetchall()
    assert simulated["clock"] != simulated["lru"]
    assert curve is not None and curve[0] == simulated["clock"]
    assert fleet is not None and fleet[0] == simulated["clock"]
    assert main(["fleet", "--warehouse", wh, "--replicas", "2", "--router", "kv-aware",
                 "--capacity-blocks", "1600", "--policy", "clock", "--model", "llama-3-8b",
                 "--tier", "dram:16"]) == 0  # fmt: skip
    with duckdb.connect(wh, read_only=True) as con:
        tiered = con.execute(
            "SELECT hit_tokens_dram FROM latest_fleet_hit_rates WHERE policy = 'clock' "
            "AND tenant = '*' AND measure_window = 'all' AND replicas = 2"
        ).fetchone()
    assert tiered is not None and tiered[0] > 0  # its victims went to DRAM, and came back
    assert ("clock",) in planned
    paragraph = words.split("\n\n")[0]  # the table below it keeps the registry's names
    assert "CLOCK " in paragraph and "clock " not in paragraph, words


@pytest.fixture(scope="module")
def gateway() -> Draft:
    """``test_validate``'s generated conversation log, ingested."""
    return Draft.build(WORKLOAD, seed=3)


def test_validate_recovers_a_clock_engine_on_the_grid(
    clock: RowPolicy, gateway: Draft, tmp_path: Path
) -> None:
    """Reports made by a CLOCK cache of 900 blocks: ``validate`` fits 900 exactly under
    ``clock``, and the command takes ``--policy clock``."""
    trace = gateway.trace
    reported = hit_tokens(trace, clock.hit_blocks(trace, 900))
    est = validate(trace, Reported(reported), "clock", resamples=20).estimate
    assert est.method == "grid" and est.capacity_blocks == 900 and est.error == 0
    lru = validate(trace, Reported(reported), "lru", resamples=20).estimate
    assert lru.error > 0  # lru does not explain a clock cache's reports as well
    validated(gateway, tmp_path, EngineCache(900), "--policy", "clock", "--resamples", "0")
    assert fleet_row(tmp_path)["policy"] == "clock"

"""Hit-rate curves: the one-pass LRU curve equals the simulator at every capacity, grid curves
equal it at their points, sampling keeps families whole, and the mrc table is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.curves.compute import compute_curves
from prefixscope.analysis.curves.curve import capacity_points
from prefixscope.analysis.curves.exact import filled_at
from prefixscope.analysis.curves.sampling import family_keys, keep, sample_batches, sample_trace
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.simulation.grid import simulate_grid
from prefixscope.analysis.simulation.scenarios import Settings, scenarios
from prefixscope.analysis.trace import isolation as iso
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.cli import main
from prefixscope.ingest import IngestOptions, ingest_files
from prefixscope.stages import curve
from prefixscope.stages.curve import CurveStageSettings
from tests.conftest import mooncake_line
from tests.test_policies import arbitrary, prefix_chains

WINDOWS = ("all", "last-half", "steady")


def make_trace(requests: list[list[int]], tenants: list[str], bs: int = 4) -> Trace:
    # Input tokens that end inside the last block, so partial blocks are exercised.
    tokens = [max(1, len(r) * bs - (i % bs)) for i, r in enumerate(requests)]
    return build_trace(requests, tokens, tenants, bs)


def simulated(trace: Trace, policy: str, capacities, mode: str, windows=WINDOWS) -> dict:  # type: ignore[no-untyped-def]
    """(window, tenant, capacity) -> (requests, input tokens, hit tokens) from `simulate`, one
    run per capacity: a curve's steady window is per capacity, simulate's shared by its run."""
    rows = [
        row
        for c in capacities
        for row in simulate_grid(
            trace, scenarios([policy], [c], [mode]), Settings(windows=tuple(windows))
        ).hit_rates
    ]
    return {
        (r["measure_window"], r["tenant"], r["capacity_blocks"]): (
            r["requests"],
            r["input_tokens"],
            r["hit_tokens"],
        )
        for r in rows
    }


def curve_rows(table: pa.Table) -> dict:  # type: ignore[no-untyped-def]
    return {
        (r["measure_window"], r["tenant"], r["capacity_blocks"]): (
            r["requests"],
            r["input_tokens"],
            r["hit_tokens"],
        )
        for r in table.to_pylist()
    }


def assert_curve_matches(curve: dict, want: dict) -> None:
    for key, value in want.items():
        assert curve[key] == value, key
    for key, value in curve.items():  # a group simulate leaves out measured nothing
        if key not in want:
            assert value[0] == 0 and value[2] == 0, key


tenant_lists = st.lists(st.sampled_from(["a", "b", "c"]), min_size=40, max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    requests=st.one_of(prefix_chains(max_requests=40), arbitrary),
    tenants=tenant_lists,
    mode=st.sampled_from(["shared", "salted"]),
)
def test_the_lru_curve_is_simulate_at_every_capacity(requests, tenants, mode) -> None:
    trace = make_trace(requests, tenants[: len(requests)])
    keyed = iso.salted(trace) if mode == "salted" else trace
    every = list(range(1, keyed.n_unique + 2))  # one past the working set: nothing changes
    table = compute_curves(
        trace, CurveSettings(windows=WINDOWS, isolation=mode, capacities=tuple(every))
    )
    assert_curve_matches(curve_rows(table), simulated(trace, "lru", every, mode))


@settings(max_examples=40, deadline=None)
@given(
    requests=prefix_chains(max_requests=40).filter(lambda r: len(r) >= 2),
    tenants=tenant_lists,
)
def test_partitioned_curves_are_each_tenants_own_cache(requests, tenants) -> None:
    # The first two requests are tenants a and b: there are always tenants to check.
    trace = make_trace(requests, ["a", "b", *tenants][: len(requests)])
    windows = ("all", "last-half")
    every = list(range(1, trace.n_unique + 2))
    table = compute_curves(
        trace,
        CurveSettings(windows=windows, isolation="partitioned", capacities=tuple(every)),
    )
    got = curve_rows(table)
    want = simulated(trace, "lru", every, "partitioned", windows)
    assert {t for _, t, _ in want} == {"*", *trace.tenants} and len(trace.tenants) >= 2
    shares = dict(zip(trace.tenants, iso.quotas(trace), strict=True))
    # A tenant's axis ends at its own working set: a larger partition holds every block of it.
    working_set = {
        t: iso.subset(trace, np.flatnonzero(trace.tenant_codes == code)).n_unique
        for code, t in enumerate(trace.tenants)
    }
    for (window, tenant, cap), value in want.items():
        if tenant == "*":  # the fleet's axis: the whole cache
            assert got[(window, tenant, cap)] == value
        else:  # a tenant's axis: its own partition, of max(1, floor(share · C)) blocks
            quota = max(1, int(shares[tenant] * cap))
            assert got[(window, tenant, min(quota, working_set[tenant]))] == value


def test_steady_windows_start_where_simulate_starts_them() -> None:
    """Per capacity, the warm-up ends at the fill point or the MSER-5 cut, whichever is later;
    the curve shares simulate's rule, so a long trace checks the MSER branch too."""
    rng = np.random.default_rng(5)
    requests = [
        [0, 1 + int(k), 100 + int(k) * 10 + int(j)] for k, j in rng.integers(0, 30, (600, 2))
    ]
    trace = make_trace(requests, ["a", "b"] * 300)
    caps = [1, 3, 10, 40, 200, 400]
    table = compute_curves(trace, CurveSettings(windows=("steady",), capacities=tuple(caps)))
    got = curve_rows(table)
    want = simulated(trace, "lru", caps, "shared", ("steady",))
    assert_curve_matches({k: v for k, v in got.items() if k[2] in caps}, want)
    assert filled_at(trace, np.array([1, trace.n_unique, trace.n_unique + 1]))[-1] == -1


def test_the_lru_curve_is_simulate_on_the_bundled_trace(bundled_trace: Trace) -> None:
    bundled = bundled_trace
    caps = [1, 1_000, 16_000, 64_000, 150_000, bundled.n_unique]
    table = compute_curves(
        bundled, CurveSettings(windows=("all", "last-half"), capacities=tuple(caps))
    )
    got = curve_rows(table)
    assert_curve_matches(
        {k: v for k, v in got.items() if k[2] in caps},
        simulated(bundled, "lru", caps, "shared", ("all", "last-half")),
    )
    # At the working set LRU holds every block: the ceiling, 0.3736 of the input tokens.
    assert got[("all", "*", bundled.n_unique)][2] == 54_098_411


@pytest.mark.parametrize(
    ("policy", "workers"), [("fifo", 1), ("s3fifo", 1), ("lfu", 1), ("fifo", 2)]
)
def test_grid_curves_are_simulate_at_their_points(policy: str, workers: int) -> None:
    rng = np.random.default_rng(7)
    requests = [[0, int(k), 50 + int(k) * 8 + int(j)] for k, j in rng.integers(1, 9, (120, 2))]
    trace = make_trace(requests, ["x", "y", "z"] * 40)
    table = compute_curves(
        trace,
        CurveSettings(
            policy=policy, windows=("all", "steady"), points=6, capacities=(5,), workers=workers
        ),
    )
    caps = sorted({r["capacity_blocks"] for r in table.to_pylist()})
    assert 5 in caps and len(caps) >= 6
    assert set(table.column("method").to_pylist()) == {"grid"}
    assert_curve_matches(
        curve_rows(table), simulated(trace, policy, caps, "shared", ("all", "steady"))
    )


@pytest.mark.parametrize(
    ("working_set", "n", "asked", "count"),
    [(1, 256, (), 1), (150, 256, (), 150), (10**6, 256, (), 256), (10**6, 200, (7, 10**7), 201)],
)
def test_capacity_points_cover_one_block_to_the_working_set(working_set, n, asked, count) -> None:
    points = capacity_points(working_set, n, asked)
    assert len(points) >= count and points[0] == 1 and working_set in points
    assert set(asked) <= set(points.tolist()) and np.all(np.diff(points) > 0)


@settings(max_examples=60, deadline=None)
@given(requests=prefix_chains(n_roots=6, max_requests=40), rate=st.sampled_from([0.2, 0.5]))
def test_sampling_keeps_prefix_families_whole(requests, rate) -> None:
    trace = make_trace(requests, ["t"] * len(requests))
    first = [tuple(r[:1]) for r in requests]
    keys = family_keys(trace.offsets, trace.hashes[trace.blocks], np.arange(trace.n_requests))
    kept = keep(keys, rate)
    for i in range(len(requests)):  # same first block, same fate
        for j in range(len(requests)):
            if first[i] and first[i] == first[j]:
                assert kept[i] == kept[j]
    if not kept.any():
        with pytest.raises(ValueError, match="keeps no request"):
            sample_trace(trace, rate)
        return
    sample = sample_trace(trace, rate)
    kept_requests = [r for r, k in zip(requests, kept, strict=True) if k]
    assert [
        list(sample.hashes[sample.blocks[a:b]])
        for a, b in zip(sample.offsets[:-1], sample.offsets[1:], strict=True)
    ] == kept_requests
    # Streaming record batches gives the same sample as sampling the loaded trace.
    batches = pa.table(
        {
            "block_hashes": pa.array(requests, pa.list_(pa.uint64())),
            "input_tokens": trace.input_tokens,
            "tenant": ["t"] * len(requests),
            "t": trace.times,
        }
    ).to_batches(max_chunksize=7)
    streamed = sample_batches(batches, rate, trace.block_size)
    assert np.array_equal(streamed.hashes[streamed.blocks], sample.hashes[sample.blocks])
    assert np.array_equal(streamed.input_tokens, sample.input_tokens)


def test_a_sampled_curve_scales_capacities_and_says_it_is_an_estimate() -> None:
    # 400 families of 3 blocks, each family asked for 5 times in a row.
    requests = [[f * 10, f * 10 + 1, f * 10 + 2] for f in range(400) for _ in range(5)]
    trace = make_trace(requests, ["t"] * len(requests))
    sample = sample_trace(trace, 0.25)
    assert 0.15 < sample.n_requests / trace.n_requests < 0.35
    table = compute_curves(
        sample, CurveSettings(sample_rate=0.25, sample_by="family", capacities=(400,))
    )
    rows = table.to_pylist()
    assert {(r["exact"], r["sample_rate"], r["sample_by"]) for r in rows} == {
        (False, 0.25, "family")
    }
    by_cap = {r["capacity_blocks"]: r["token_hit_rate"] for r in rows if r["tenant"] == "*"}
    # Every family is reused right away, so any capacity of 3+ blocks (full scale: 12+) hits 4/5.
    assert by_cap[400] == pytest.approx(0.8, abs=0.01)
    assert min(by_cap) == 4  # one sampled block stands for 1 / 0.25 blocks


def test_the_mrc_table_holds_a_drawable_monotone_curve_per_tenant(wh, write_lines) -> None:
    path, con = wh
    for tenant, root in (("alpha", 10_000), ("beta", 20_000)):
        lines = [
            mooncake_line(
                timestamp=i, input_length=1500, hash_ids=[root, root + 1 + i % 150, root + 1000 + i]
            )
            for i in range(300)
        ]
        with warehouse.recorded_run(con, "ingest", {}) as run_id:
            ingest_files(
                con, [write_lines(lines)], "mooncake", IngestOptions(tenant=tenant), run_id
            )
    con.close()
    result = curve.measure_curve(path, CurveStageSettings(CurveSettings(model="llama-3-8b")))
    con = warehouse.connect(path)
    assert con.execute("SELECT DISTINCT run_id FROM mrc").fetchall() == [(result.run_id,)]
    assert con.execute("SELECT count(*) FROM mrc").fetchone() == (result.table.num_rows,)
    counts = dict(con.execute("SELECT tenant, count(*) FROM mrc GROUP BY ALL").fetchall())
    assert set(counts) == {"*", "alpha", "beta"} and min(counts.values()) >= 200
    for tenant in counts:
        rates = [
            r
            for (r,) in con.execute(
                "SELECT token_hit_rate FROM mrc WHERE tenant = ? ORDER BY capacity_blocks",
                [tenant],
            ).fetchall()
        ]
        assert all(b >= a for a, b in zip(rates, rates[1:], strict=False)) and rates[-1] > 0
    gib = con.execute(
        "SELECT capacity_gib FROM mrc WHERE capacity_blocks = 1 AND tenant = '*'"
    ).fetchone()[0]
    assert gib == pytest.approx(512 * 131_072 / 2**30)  # one block of 512 llama-3-8b tokens
    assert con.execute("SELECT command, status FROM runs WHERE command = 'curve'").fetchall() == [
        ("curve", "succeeded")
    ]
    con.close()
    # The command line writes the same table and prints the fleet's curve.
    assert main(["curve", "--warehouse", str(path), "--window", "all,steady"]) == 0
    assert main(["curve", "--warehouse", str(path), "--policy", "ceiling"]) == 2


def test_policies_without_a_curve_are_refused() -> None:
    for policy in ("ceiling", "pinned", "nope"):
        with pytest.raises(ValueError):
            CurveSettings(policy=policy).check()
    with pytest.raises(ValueError, match="partitioned"):
        CurveSettings(windows=("steady",), isolation="partitioned").check()
    # every other bounded policy has one (a grid curve, or lru's one-pass curve)
    curved = sorted(n for n, p in POLICIES.items() if p.bounded and n != "pinned")
    assert "lru" in curved and "fifo" in curved
    for policy in curved:
        CurveSettings(policy=policy).check()


def test_the_curve_command_prints_the_fleets_curve(wh, write_lines, capsys, tmp_path: Path) -> None:
    path, con = wh
    lines = [mooncake_line(timestamp=i, hash_ids=[1, 2 + i % 3]) for i in range(20)]
    with warehouse.recorded_run(con, "ingest", {}) as run_id:
        ingest_files(con, [write_lines(lines)], "mooncake", IngestOptions(), run_id)
    con.close()
    assert main(["curve", "--warehouse", str(path), "--capacity-blocks", "3"]) == 0
    out = capsys.readouterr().out
    assert "lru (shared, stack, exact), window all" in out and "3 blocks" in out

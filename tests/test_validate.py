"""``prefixscope validate``: per-lookup LRU hit capacities are the simulator's, the error profile
is the brute-force error at every capacity, and on generated gateway logs whose reports come
from a known engine cache the effective capacity is recovered within its range."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope.analysis.curves.depths import NEVER, hit_capacities
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.analysis.validate import compare, fit
from prefixscope.analysis.validate.reported import (
    MISSING,
    Reported,
    comparison_unit,
    engine_block_size,
)
from prefixscope.analysis.validate.tables import validate
from prefixscope.cli import main
from prefixscope.stages import report
from prefixscope.stages.report import ReportSettings
from prefixscope.stages.validate import has_reports
from prefixscope.synthetic_gateway import Draft, EngineCache, GatewayLog, GatewayWorkload
from tests.conftest import mooncake_line
from tests.test_report import tables

WORKLOAD = GatewayWorkload(sessions=150, mean_gap_s=120.0)


@pytest.fixture(scope="module")
def draft() -> Draft:
    """One generated conversation log (635 requests, 8,106 distinct blocks of 16 tokens),
    ingested once; each test writes it with its own engine's reports."""
    return Draft.build(WORKLOAD, seed=3)


def validated(draft: Draft, folder: Path, engine: EngineCache, *flags: str) -> GatewayLog:
    """The log written with ``engine``'s reports, ingested and validated by the command."""
    log = draft.write(folder / "gateway.jsonl", engine, seed=5)
    wh = str(folder / "wh.duckdb")
    ingest = ["ingest", "--format", "openai", "--tenant-field", "user", "--input", str(log.path)]
    assert main([*ingest, "--warehouse", wh]) == 0
    assert main(["validate", "--warehouse", wh, *flags]) == 0
    return log


def fleet_row(folder: Path) -> dict:
    with duckdb.connect(str(folder / "wh.duckdb"), read_only=True) as con:
        cur = con.execute("SELECT * FROM latest_validation WHERE tenant = '*'")
        names = [d[0] for d in cur.description]
        return dict(zip(names, cur.fetchall()[0], strict=True))


# --- the exact LRU machinery -----------------------------------------------------------------


def test_hit_capacities_give_the_simulators_hits_request_by_request(draft: Draft) -> None:
    trace = draft.trace
    depth = hit_capacities(trace)
    assert np.all(np.diff(depth)[np.diff(trace.request_of_lookup) == 0] >= 0)  # leading run
    for capacity in (1, 37, 400, 1_500, 5_000, trace.n_unique):
        ours = np.bincount(trace.request_of_lookup, depth <= capacity, trace.n_requests)
        assert np.array_equal(ours, POLICIES["lru"].hit_blocks(trace, capacity)), capacity


def test_a_hit_capacity_is_the_stack_depth_of_the_deepest_block_so_far() -> None:
    # a b c, touched deepest first, then d: the stack is d a b c (most recent first), so at
    # the third request a lies 2 deep and b 3; e is new, a miss at every capacity.
    trace = build_trace([[1, 2, 3], [4], [1, 2, 5]], [48, 16, 48], ["t"] * 3, 16)
    assert hit_capacities(trace).tolist() == [NEVER] * 4 + [2, 3, NEVER]


@pytest.mark.parametrize("unit", [16, 32])
def test_the_exact_profile_is_the_brute_force_error_at_every_capacity(draft, unit) -> None:
    trace = draft.trace
    rng = np.random.default_rng(0)
    sim_at = POLICIES["lru"].hit_blocks(trace, 700)
    reported = hit_tokens(trace, sim_at) // unit * unit
    noisy = rng.random(trace.n_requests) < 0.3
    reported[noisy] = rng.integers(0, 40, int(noisy.sum())) * unit
    compared = rng.random(trace.n_requests) < 0.8
    profile = fit.exact_profile(trace, hit_capacities(trace), reported, compared, unit)
    weights = rng.integers(0, 3, int(compared.sum())).astype(np.float64)
    errors, totals = profile.errors(weights), profile.totals
    for capacity in (0, 1, 5, 88, 699, 700, 701, 3_000, trace.n_unique + 10):
        sim = hit_tokens(trace, POLICIES["lru"].hit_blocks(trace, capacity)) if capacity else 0
        sim = (np.zeros(trace.n_requests, np.int64) + sim) // unit * unit
        j = np.searchsorted(profile.starts, capacity, side="right") - 1
        assert profile.starts[j] <= capacity <= profile.ends[j]
        assert errors[j] == int(np.abs(sim - reported)[compared] @ weights), capacity
        assert totals[j] == sim[compared].sum(), capacity


# --- recovering a known capacity -----------------------------------------------------------------

# (engine, the percentiles of its capacity over the requests between which the estimate must
# lie, whether every report is the engine's own)
RECOVERY = [
    pytest.param(EngineCache(300), (50, 50), True, id="lru-300"),
    pytest.param(EngineCache(1_234), (50, 50), True, id="lru-1234"),
    pytest.param(EngineCache(1_234, noise_share=0.15), (50, 50), False, id="lru-1234-15%-garbled"),
    # HBM less the running requests' KV: 1,461-2,400 blocks over time, median 2,148. A block
    # evicted while the cache is small stays evicted, so the cache keeps less than its median.
    pytest.param(EngineCache(2_400, running=True, tpot_s=0.1), (5, 50), False, id="hbm-less-kv"),
]


@pytest.mark.parametrize(("engine", "band", "clean"), RECOVERY)
def test_validate_recovers_the_engines_capacity(draft, tmp_path, capsys, engine, band, clean):
    log = validated(draft, tmp_path, engine)
    assert has_reports(tmp_path / "wh.duckdb")  # the flow validates
    row = fleet_row(tmp_path)
    low, high = row["capacity_low_blocks"], row["capacity_high_blocks"]
    lowest, highest = np.percentile(log.capacities, band)
    assert row["compared"] == row["requests"] == draft.trace.n_requests
    assert lowest <= row["capacity_blocks"] <= highest
    assert low <= row["best_low_blocks"] <= row["capacity_blocks"] <= row["best_high_blocks"]
    assert row["best_high_blocks"] <= high
    assert low <= highest and lowest <= high  # the range meets the band
    if clean:  # every request agrees
        assert row["exact_match_share"] == 1.0 and row["mean_abs_error_tokens"] == 0.0
        assert row["curve_capacity_blocks"] <= row["capacity_blocks"]
    else:
        assert 0.75 < row["exact_match_share"] < 1.0 and row["correlation"] > 0.9
    out = capsys.readouterr().out
    assert f"Effective capacity (lru, exact): {row['capacity_blocks']:,} blocks" in out
    assert f"{row['capacity_blocks'] * 16:,} tokens" in out


def test_a_fifo_engine_is_recovered_on_the_grid(draft) -> None:
    trace = draft.trace
    reported = hit_tokens(trace, POLICIES["fifo"].hit_blocks(trace, 900))
    est = validate(trace, Reported(reported), "fifo", resamples=20).estimate
    assert est.method == "grid" and est.capacity_blocks == 900 and est.error == 0


def test_an_engine_that_never_evicts_gives_a_lower_bound(draft, tmp_path) -> None:
    validated(draft, tmp_path, EngineCache(draft.trace.n_unique), "--resamples", "0")
    row = fleet_row(tmp_path)
    assert row["capacity_high_blocks"] is None and row["best_high_blocks"] is None
    assert row["capacity_low_blocks"] == row["capacity_blocks"] <= draft.trace.n_unique
    assert "no eviction explains the reports as well" in row["note"]


def test_the_range_is_the_same_on_every_run_and_holds_the_truth(draft) -> None:
    trace = draft.trace
    reported = hit_tokens(trace, POLICIES["lru"].hit_blocks(trace, 800))
    noisy = np.random.default_rng(1).random(trace.n_requests) < 0.3
    reported[noisy] = 0  # reports lost, or a cache reset before them
    runs = [validate(trace, Reported(reported), resamples=50).estimate for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0].low_blocks <= 800 <= runs[0].high_blocks  # type: ignore[operator]
    assert runs[0].low_blocks < runs[0].best_low  # noise: a range around the best fit
    few = np.where(np.arange(trace.n_requests) % 4 == 0, reported, MISSING)
    sparse = validate(trace, Reported(few), resamples=50).estimate
    assert sparse.low_blocks <= 800 <= sparse.high_blocks  # type: ignore[operator]
    assert validate(trace, Reported(few), resamples=50, seed=1).estimate != sparse


# --- what is compared --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "engine", "warehouse", "unit"),
    [
        ([0, 16, 32, 48, 64, 80, 96, 112, 128], 16, 16, 16),
        ([32 * k for k in range(12)], 32, 16, 32),  # the engine's blocks are coarser
        ([16 * k for k in range(12)], 16, 64, 64),  # the warehouse's blocks are coarser
        ([0, 4096, 8192], None, 16, 16),  # too few distinct counts to infer anything
        ([16 * k + 1 for k in range(12)], 1, 16, 16),  # token-granular reports
    ],
)
def test_counts_are_compared_in_whole_blocks_of_both(counts, engine, warehouse, unit) -> None:
    reported = Reported(np.array([*counts, MISSING], np.int64))
    assert engine_block_size(reported) == engine
    assert comparison_unit(warehouse, engine) == unit


def test_requests_without_a_count_are_counted_not_compared(draft, tmp_path) -> None:
    log = draft.write(tmp_path / "gateway.jsonl", EngineCache(600), seed=5)
    lines = log.path.read_text().splitlines()
    for i in range(0, len(lines), 10):  # every tenth response lost its usage details
        lines[i] = lines[i].replace(', "prompt_tokens_details": {"cached_tokens"', ', "x": {"y"')
    log.path.write_text("\n".join(lines) + "\n")
    wh = str(tmp_path / "wh.duckdb")
    main(["ingest", "--format", "openai", "--input", str(log.path), "--warehouse", wh])
    assert main(["validate", "--warehouse", wh, "--top", "3"]) == 0
    row = fleet_row(tmp_path)
    missing = -(-len(lines) // 10)
    assert row["requests"] - row["compared"] == missing
    assert f"{missing:,} requests carry no reported count" in row["note"]
    assert row["best_low_blocks"] <= 600 <= row["best_high_blocks"]
    assert row["exact_match_share"] == 1.0


def test_a_warehouse_without_reports_is_one_line(write_lines, tmp_path, capsys) -> None:
    wh = str(tmp_path / "wh.duckdb")
    log = str(write_lines([mooncake_line()]))
    assert main(["ingest", "--format", "mooncake", "--input", log, "--warehouse", wh]) == 0
    assert not has_reports(wh)  # the flow leaves validate out
    capsys.readouterr()
    assert main(["validate", "--warehouse", wh]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no request carries a reported cached-token count" in err[0]
    assert "--format openai" in err[0]


# --- the requests that disagree, and why -----------------------------------------------------


def _disagreement(requests, tokens, sim_blocks, reported, depth=True):  # type: ignore[no-untyped-def]
    trace = build_trace(requests, tokens, ["t"] * len(requests), 16, last_token_rule=[True] * 3)
    sim = hit_tokens(trace, np.array(sim_blocks))
    comparison = compare.Comparison(2, sim, np.array(reported, np.int64))
    depths = hit_capacities(trace) if depth else None
    return compare.disagreements(trace, comparison, 5, depths)


@pytest.mark.parametrize(
    ("sim_blocks", "reported", "block", "cause", "needs"),
    [
        ([0, 1, 0], [0, 16, 32], 0, "unseen", None),  # block 9 is new at the third request
        ([0, 0, 0], [0, 32, 0], 0, "evicted", 1),  # 1 is the most recent block then
        ([0, 2, 0], [0, 16, 0], 1, "kept", 2),  # 2 lies 2 deep: a, then b
        ([0, 2, 0], [0, 48, 0], 2, "last_token", 3),  # a whole-block prompt of 3 blocks
        ([0, 0, 2], [0, 0, 48], 2, "beyond_prompt", None),  # 40 tokens: 2 whole blocks
    ],
)
def test_each_disagreement_names_its_first_block_and_cause(
    sim_blocks, reported, block, cause, needs
) -> None:
    # request 0: 1 2 3, touched deepest first (stack 1 2 3, most recent first);
    # request 1: 1 2 3 again, 48 tokens; request 2: 9 1, 40 tokens (a partial tail)
    rows = _disagreement([[1, 2, 3], [1, 2, 3], [9, 1]], [48, 48, 40], sim_blocks, reported)
    assert len(rows) == 1
    (row,) = rows
    assert (row["first_disagreeing_block"], row["cause"]) == (block, cause)
    assert row["hit_capacity_blocks"] == needs
    assert row["error_tokens"] == row["simulated_hit_tokens"] - row["reported_hit_tokens"] != 0


def test_the_largest_disagreements_come_first(draft) -> None:
    trace = draft.trace
    reported = hit_tokens(trace, POLICIES["lru"].hit_blocks(trace, 500))
    reported[[10, 20, 30]] = [0, 16, 0]
    v = validate(trace, Reported(reported), resamples=0, top=2)
    errors = [abs(e) for e in v.disagreements["error_tokens"].to_pylist()]
    assert len(errors) == 2 and errors == sorted(errors, reverse=True)
    assert v.estimate.capacity_blocks == 500


# --- the page -----------------------------------------------------------------------------------


def test_the_page_shows_validation_only_when_there_is_some(draft, tmp_path) -> None:
    engine = replace(EngineCache(700), noise_share=0.05)
    validated(draft, tmp_path, engine, "--model", "llama-3-8b")
    html = report.write_report(tmp_path / "wh.duckdb", ReportSettings(out=str(tmp_path / "r.html")))
    page = html.read_text()
    assert "Does the simulator agree with the engines?" in page
    assert "Effective capacity (lru, exact): 7" in page and "GiB of llama-3-8b KV" in page
    assert {"validation-agreement", "validation-disagreements"} <= set(tables(page))
    assert "chatcmpl-" in page  # the log's own request ids, for grep
    wh = str(tmp_path / "unvalidated.duckdb")
    main(
        [
            "ingest",
            "--format",
            "openai",
            "--input",
            str(tmp_path / "gateway.jsonl"),
            "--warehouse",
            wh,
        ]
    )
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "r2.html"))).read_text()
    assert "Does the simulator agree with the engines?" not in page

"""Hostile inputs to ``validate`` and ``curve``: reports larger than their prompt are counted,
not believed; a fit on too few reports names no capacity; no validated rate exceeds its
ceiling; a sampled curve carries its sampled blocks and interval, warns below the floor and
refuses an empty or undrawable sample."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.curves.block_sampling import sample_blocks
from prefixscope.analysis.curves.sampled import sampled_sums
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.validate.reported import MISSING, Reported
from prefixscope.analysis.validate.tables import MIN_FIT_REPORTS, validate
from prefixscope.cli import main
from prefixscope.dashboards.report import Choices, curve_figure
from prefixscope.stages import report
from prefixscope.stages.curve import SAMPLED_BLOCKS_FLOOR
from prefixscope.stages.report import ReportSettings
from prefixscope.synthetic_gateway import Draft, EngineCache, GatewayWorkload, engine_reports
from tests.conftest import mooncake_line
from tests.test_report import figures


@pytest.fixture(scope="module")
def draft() -> Draft:
    return Draft.build(GatewayWorkload(sessions=150, mean_gap_s=120.0), seed=3)


def fleet(v) -> dict:  # type: ignore[no-untyped-def]
    return v.agreement.to_pylist()[0]


# --- reports against the prompt ------------------------------------------------------------

# (the report given every 7th request, as a function of its prompt's tokens; usable or beyond)
REPORTS = [
    pytest.param(lambda n: 0 * n, False, id="zero"),
    pytest.param(lambda n: n, False, id="equal-to-the-prompt"),
    pytest.param(lambda n: n + 1, True, id="prompt-plus-one"),
    pytest.param(lambda n: 3 * n, True, id="three-times-the-prompt"),
]


@pytest.mark.parametrize(("report_of", "beyond"), REPORTS)
def test_reports_beyond_the_prompt_are_counted_and_left_out(draft, report_of, beyond) -> None:
    trace = draft.trace
    honest = engine_reports(trace, np.full(trace.n_requests, 1_234, np.int64))
    odd = np.arange(trace.n_requests) % 7 == 0
    hostile = np.where(odd, report_of(trace.input_tokens), honest)
    v = validate(trace, Reported(hostile), resamples=20)
    row = fleet(v)
    assert row["beyond_prompt"] == (int(odd.sum()) if beyond else 0)
    assert row["compared"] == trace.n_requests - row["beyond_prompt"]
    assert row["reported_hit_tokens"] <= row["input_tokens"]
    assert row["simulated_hit_tokens"] <= row["ceiling_hit_tokens"] <= row["input_tokens"]
    if beyond:  # the fit is the one without those reports, and says what it left out
        without = validate(trace, Reported(np.where(odd, MISSING, honest)), resamples=20)
        assert v.estimate == without.estimate
        assert f"{int(odd.sum()):,} reports exceed their prompt's tokens" in row["note"]
        assert not set(v.disagreements["cause"].to_pylist()) & {"unseen", "evicted"} or (
            v.estimate.capacity_blocks == without.estimate.capacity_blocks  # type: ignore[union-attr]
        )


def test_a_report_is_beyond_only_above_the_prompts_tokens_not_its_blocks() -> None:
    # 40 tokens in blocks of 16: 2 whole blocks and a partial one. 40 is the prompt (usable);
    # 48, its block-rounded size, is beyond it.
    trace = build_trace([[1, 2, 3]] * 3, [40, 40, 40], ["t"] * 3, 16)
    reports = Reported(np.array([40, 48, 0], np.int64))
    assert reports.usable(trace.input_tokens).tolist() == [True, False, True]
    assert reports.beyond_prompt(trace.input_tokens).tolist() == [False, True, False]


def test_the_command_prints_and_the_page_shows_reports_beyond_the_prompt(draft, tmp_path) -> None:
    log = draft.write(tmp_path / "gateway.jsonl", EngineCache(700), seed=5)
    lines = [json.loads(x) for x in log.path.read_text().splitlines()]
    for line in lines[::5]:  # every fifth engine reports three times its prompt
        usage = line["response"]["usage"]
        # a usage that reports no prompt total: ingest cannot tell its count is beyond the
        # prompt (one that does is rejected there), so validate must
        usage["prompt_tokens_details"]["cached_tokens"] = 3 * usage.pop("prompt_tokens")
    log.path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    wh = str(tmp_path / "wh.duckdb")
    assert main(["ingest", "--format", "openai", "--input", str(log.path), "--warehouse", wh]) == 0
    with duckdb.connect(wh, read_only=True) as con:
        (over,) = con.execute(
            "SELECT count(*) FROM requests WHERE reported_cached_tokens > input_tokens"
        ).fetchone()  # type: ignore[misc]
    assert over > 0
    assert main(["validate", "--warehouse", wh]) == 0
    with duckdb.connect(wh, read_only=True) as con:
        row = con.execute(
            "SELECT beyond_prompt, reported_hit_tokens, input_tokens, capacity_blocks "
            "FROM latest_validation WHERE tenant = '*'"
        ).fetchone()
    assert row is not None and row[0] == over and row[1] <= row[2] and row[3] is not None
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "r.html"))).read_text()
    assert "reports beyond the prompt (not compared)" in page
    assert f"{over:,} reports exceed their prompt" in page


# --- too few usable reports -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usable", "beyond", "fitted"),
    [
        (0, 40, False),  # every count is beyond its prompt
        (5, 0, False),
        (MIN_FIT_REPORTS - 1, 30, False),
        (MIN_FIT_REPORTS, 0, True),
    ],
)
def test_a_fit_on_too_few_usable_reports_names_no_capacity(draft, usable, beyond, fitted) -> None:
    trace = draft.trace
    honest = engine_reports(trace, np.full(trace.n_requests, 600, np.int64))
    tokens = np.full(trace.n_requests, MISSING, np.int64)
    tokens[:usable] = honest[:usable]
    tokens[usable : usable + beyond] = 2 * trace.input_tokens[usable : usable + beyond]
    v = validate(trace, Reported(tokens), resamples=10)
    row = fleet(v)
    assert row["compared"] == usable and row["beyond_prompt"] == beyond
    assert (v.estimate is not None) == fitted == (row["capacity_blocks"] is not None)
    if not fitted:
        assert row["simulated_hit_tokens"] is None and v.disagreements.num_rows == 0
        assert f"too few usable reports ({usable:,}" in row["note"]


def test_the_command_says_so_when_too_few_reports_fit(draft, tmp_path, capsys) -> None:
    log = draft.write(tmp_path / "gateway.jsonl", EngineCache(700), seed=5)
    lines = log.path.read_text().splitlines()[:40]
    log.path.write_text("\n".join(lines) + "\n")
    wh = str(tmp_path / "wh.duckdb")
    assert main(["ingest", "--format", "openai", "--input", str(log.path), "--warehouse", wh]) == 0
    capsys.readouterr()
    assert main(["validate", "--warehouse", wh]) == 0
    out = capsys.readouterr().out
    assert "No effective capacity (lru): too few usable reports (40) to fit one." in out
    assert "Effective capacity" not in out
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "r.html"))).read_text()
    assert "too few usable reports (40) to fit one" in page


# --- the ceiling ----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([0.0, 0.5, 1.0, 1.5, 4.0]))
def test_no_validated_rate_exceeds_its_ceiling(seed: int, scale: float) -> None:
    rng = np.random.default_rng(seed)
    n = MIN_FIT_REPORTS + 30
    roots = rng.integers(1, 6, n) * 1000
    depth = rng.integers(1, 6, n)
    requests = [[int(r) + k for k in range(d)] for r, d in zip(roots, depth, strict=True)]
    tokens = depth * 16 - rng.integers(0, 16, n)
    tenants = rng.choice(["a", "b"], n).tolist()
    trace = build_trace(requests, tokens, tenants, 16)
    reports = np.floor(rng.random(n) * scale * tokens).astype(np.int64)
    reports[rng.random(n) < 0.1] = MISSING
    v = validate(trace, Reported(reports), resamples=0)
    for row in v.agreement.to_pylist():
        inp = row["input_tokens"]
        assert row["reported_hit_tokens"] <= inp
        if row["simulated_hit_tokens"] is not None:
            assert row["simulated_hit_tokens"] <= row["ceiling_hit_tokens"] <= inp
        if inp:
            assert row["reported_hit_tokens"] / inp <= 1
            assert row["ceiling_hit_tokens"] / inp <= 1


# --- sampled curves -------------------------------------------------------------------------------


def mrc_rows(wh: str | Path) -> pl.DataFrame:
    with warehouse.reading(wh) as con:
        return pl.from_arrow(con.sql("SELECT * FROM mrc").to_arrow_table())  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("rate", "code", "says"),
    [
        ("0.1", 0, None),
        ("0.0001", 0, f"blocks sampled (floor {SAMPLED_BLOCKS_FLOOR:,})"),
        ("1e-9", 2, "a sample rate of 1e-09 cannot be drawn"),
    ],
)
def test_sample_rates_on_the_bundled_trace(bundled_warehouse, tmp_path, capsys, rate, code, says):
    wh = bundled_warehouse.copy_to(tmp_path)
    capsys.readouterr()
    args = ["curve", "--warehouse", str(wh), "--sample-rate", rate, "--capacity-blocks", "10000"]
    assert main(args) == code
    err = capsys.readouterr().err.strip().splitlines()
    rows = mrc_rows(wh)
    if says is None:
        assert err == []
    else:
        assert len(err) == 1 and says in err[0]
    if code:
        assert err[0].startswith("prefixscope curve: error: ") and rows.is_empty()
        return
    assert err == [] or err[0].startswith("prefixscope curve: warning: only ")
    fleet_rows = rows.filter(pl.col("tenant") == "*")
    assert fleet_rows["sampled_blocks"].null_count() == 0
    assert (fleet_rows["ci_low"] <= fleet_rows["token_hit_rate"]).all()
    assert (fleet_rows["token_hit_rate"] <= fleet_rows["ci_high"]).all()
    assert (fleet_rows["ci_high"] <= 1).all() and (fleet_rows["ci_low"] >= 0).all()
    # the exact figure at 10,000 blocks (21.57%) lies inside the interval
    at = fleet_rows.filter(pl.col("capacity_blocks") == 10_000).row(0, named=True)
    assert at["ci_low"] <= 0.2157 <= at["ci_high"]


def test_an_empty_sample_is_refused_and_nothing_is_written(write_lines, tmp_path, capsys):
    path = tmp_path / "wh.duckdb"
    log = write_lines(
        [mooncake_line(0, 1500, hash_ids=[1, 2, 3]), mooncake_line(1, 1500, hash_ids=[1, 2, 4])]
    )
    ingest = ["ingest", "--format", "mooncake", "--input", str(log), "--warehouse", str(path)]
    # plain ids 1..4: a sample by hash at 0.001 draws none of them (keyed, it could draw one)
    assert main([*ingest, "--hash-key-file", "none"]) == 0
    capsys.readouterr()
    args = ["curve", "--warehouse", str(path), "--sample-rate", "0.001", "--sample-by", "block"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "draws no block of this trace" in err[0]
    assert mrc_rows(path).is_empty()


def test_an_exact_curve_has_no_interval(bundled_warehouse, tmp_path) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    assert main(["curve", "--warehouse", str(wh), "--points", "8"]) == 0
    rows = mrc_rows(wh)
    assert (
        rows.height
        and rows.select("sampled_blocks", "ci_low", "ci_high").null_count().row(0)
        == (rows.height,) * 3
    )


@pytest.mark.parametrize("sample_by", ["block", "block-head"])
def test_a_sample_whose_interval_would_not_hold_carries_none(
    bundled_warehouse, tmp_path, sample_by
) -> None:
    """Only block-hot's jackknife was shown to cover the exact curve; other block samples get
    their sampled blocks and no band."""
    wh = bundled_warehouse.copy_to(tmp_path)
    args = ["curve", "--warehouse", str(wh), "--sample-rate", "0.1", "--sample-by", sample_by]
    assert main(args) == 0
    rows = mrc_rows(wh)
    assert rows.height and rows["sampled_blocks"].null_count() == 0
    assert rows["ci_low"].null_count() == rows["ci_high"].null_count() == rows.height


def test_replicate_weights_of_one_are_the_sampled_curve(bundled_trace) -> None:
    s = CurveSettings(sample_rate=0.05)
    sample = sample_blocks(bundled_trace, 0.05, s.head, s.hot)
    points = np.array([1, 10, 100, 1_000, 10_000])
    plain = sampled_sums(sample, points, ["all"])
    ones = sampled_sums(sample, points, ["all"], np.ones(sample.trace.n_unique))
    for a, b in zip(plain, ones, strict=True):
        assert np.array_equal(a.sampled_hits, b.sampled_hits)
        assert np.array_equal(a.head_hits, b.head_hits)  # type: ignore[arg-type]
        assert a.sampled_tokens == b.sampled_tokens


def test_an_older_warehouse_opens_and_its_curve_renders(tmp_path) -> None:
    wh = tmp_path / "old.duckdb"
    warehouse.connect(wh).close()
    with duckdb.connect(str(wh)) as con:  # mrc and validation as written before the interval
        for column in ("sampled_blocks", "ci_low", "ci_high"):
            con.execute(f"ALTER TABLE mrc DROP COLUMN {column}")
        for column in ("beyond_prompt", "ceiling_hit_tokens"):
            con.execute(f"ALTER TABLE validation DROP COLUMN {column}")
        for column in ("capacity_blocks", "simulated_hit_tokens", "reported_more"):
            con.execute(f"ALTER TABLE validation ALTER COLUMN {column} SET NOT NULL")
    with warehouse.connect(wh) as con:  # the schema adds the columns and drops NOT NULL
        names = {r[0] for r in con.execute("DESCRIBE mrc").fetchall()}
        assert {"sampled_blocks", "ci_low", "ci_high"} <= names
        con.execute(
            "INSERT INTO validation (run_id, tenant, policy, method, requests, compared, "
            "block_size, engine_block_size, compare_unit_tokens, resamples, input_tokens, "
            "reported_hit_tokens) VALUES ('r', '*', 'lru', 'exact', 1, 0, 16, 16, 16, 0, 0, 0)"
        )
    old = pl.DataFrame(
        {
            "measure_window": ["all"] * 2,
            "policy": ["lru"] * 2,
            "isolation": ["shared"] * 2,
            "sample_rate": [0.1] * 2,
            "sample_by": ["block"] * 2,
            "tenant": ["*"] * 2,
            "capacity_blocks": [10, 100],
            "capacity_tokens": [160, 1600],
            "capacity_gib": [None, None],
            "token_hit_rate": [0.1, 0.2],
        }
    )
    drawn = curve_figure(old, Choices.of(old, old))
    assert drawn is not None and [len(data) for data, _ in figures(drawn)] == [1]  # the line alone


def test_the_page_shades_a_sampled_curves_interval(bundled_warehouse, tmp_path) -> None:
    wh = bundled_warehouse.copy_to(tmp_path)
    assert main(["curve", "--warehouse", str(wh), "--sample-rate", "0.1", "--points", "16"]) == 0
    page = report.write_report(wh, ReportSettings(out=str(tmp_path / "r.html"))).read_text()
    assert "(95% interval)" in page and "sampled blocks)" in page
    assert main(["curve", "--warehouse", str(wh), "--points", "16"]) == 0  # exact: no band
    rows = mrc_rows(wh).filter(pl.col("exact"))
    assert curve_figure(rows, Choices.of(rows, rows)) is not None
    assert rows["ci_low"].null_count() == rows.height

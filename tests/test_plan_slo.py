"""The SLO planner (``plan --deployments … --slo …``): the search against brute force, the
trace with prefix caching off, the tables, the words, and bad input."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.cost.deployment import GPU_MEMORY_UTILIZATION
from prefixscope.analysis.cost.gpus import GPUS
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.fleet.run import MAX_REPLICAS, Fleet, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.plan.held import combine
from prefixscope.analysis.plan.nocache import without_prefix_cache
from prefixscope.analysis.plan.probe import Shared, simulate_window
from prefixscope.analysis.plan.search import Group, Probe, Result, search
from prefixscope.analysis.plan.slo import parse_slo
from prefixscope.analysis.plan.slo_settings import PlanSloSettings, search_groups
from prefixscope.analysis.plan.slo_tables import HOURS_PER_MONTH
from prefixscope.analysis.plan.space import replica_of, series_of
from prefixscope.analysis.plan.windows import WHOLE, split
from prefixscope.analysis.trace.load import load_trace
from prefixscope.cli import main
from prefixscope.dashboards.plan_slo import IDEAL_CAVEAT, from_warehouse, sentences, short
from tests.conftest import conversation_lines


def rows(wh: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql).fetchall()


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sixty conversations of three turns, 512-token blocks, each sharing a system prompt."""
    folder = tmp_path_factory.mktemp("slo")
    lines = conversation_lines(60, start_every_s=5, turn_every_s=40)
    log = folder / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    wh = folder / "wh.duckdb"
    assert (
        main(["ingest", "--format", "mooncake", "--input", str(log), "--warehouse", str(wh)]) == 0
    )
    return wh


@pytest.fixture(scope="module")
def loaded(small: Path):  # type: ignore[no-untyped-def]
    with warehouse.connect(small, read_only=True) as con:
        return load_trace(con), load_traffic(con)


# ---------------------------------------------------------------- the SLO as given


@pytest.mark.parametrize(
    ("text", "names", "limits"),
    [
        ("ttft-p95=2", ["ttft-p95"], [2.0]),
        ("ttft-p95=2,ttft-p99=5.5,tpot-p95=0.05", ["ttft-p95", "ttft-p99", "tpot-p95"],
         [2.0, 5.5, 0.05]),
        (" TTFT-P99.9 = 1e1 ", ["ttft-p99.9"], [10.0]),
    ],
)  # fmt: skip
def test_an_slo_parses_to_its_targets(text: str, names: list[str], limits: list[float]) -> None:
    slo = parse_slo(text)
    assert [t.name for t in slo.targets] == names
    assert [t.limit_s for t in slo.targets] == limits
    assert parse_slo(slo.text) == slo


def test_the_binding_target_has_the_least_slack() -> None:
    slo = parse_slo("ttft-p95=2,tpot-p95=0.1")
    # slack: ttft (2 - 1.5) / 2 = 0.25, tpot (0.1 - 0.09) / 0.1 = 0.1
    assert slo.binding({"ttft-p95": 1.5, "tpot-p95": 0.09}) == "tpot-p95"
    assert slo.meets({"ttft-p95": 1.5, "tpot-p95": 0.09})
    assert not slo.meets({"ttft-p95": 2.5, "tpot-p95": 0.01})
    assert slo.binding({"ttft-p95": 2.5, "tpot-p95": 0.01}) == "ttft-p95"


# ---------------------------------------------------------------- caching off


def test_with_caching_off_no_block_repeats_and_nothing_hits(loaded) -> None:  # noqa: ANN001
    trace, traffic = loaded
    fresh = without_prefix_cache(trace)
    assert fresh.n_unique == trace.n_lookups == len(np.unique(fresh.blocks))
    assert np.array_equal(fresh.offsets, trace.offsets)
    assert np.array_equal(fresh.input_tokens, trace.input_tokens)
    shape = resolve_model("llama-3-8b")
    r = replica_of("h100x1", shape, trace.block_size, "bf16", from_roofline(shape, GPUS["h100"]))
    for router in ("session", "cache-aware"):
        fleet = Fleet(router, 3, r.kv_pool_blocks)
        on = simulate_fleet(trace, traffic, fleet, r.engine)
        off = simulate_fleet(fresh, traffic, fleet, r.engine)
        assert on.hit_tokens.sum() > 0 and off.hit_tokens.sum() == 0
        if router == "session":  # the prompt's hash routes as with caching on
            assert np.array_equal(on.replica, off.replica)
        # a prompt computed in full never comes out sooner than with its cached prefix alone
        assert off.no_cache_s.sum() == pytest.approx(on.no_cache_s.sum())


# ---------------------------------------------------------------- the search


def _brute(groups, slo, run):  # type: ignore[no-untyped-def]
    """Every series at every count: the cheapest that meets (the search's order)."""
    out = []
    for gi, g in enumerate(groups):
        found = []
        for s in g.series:
            probes = [Probe(gi, s, n, g.load_scale, g.prefix_caching)
                      for n in range(1, MAX_REPLICAS + 1)]  # fmt: skip
            for p, r in zip(probes, run(probes), strict=True):
                if slo.meets(r.metrics):
                    found.append((round(s.usd_per_hour(n := p.replicas), 9),
                                  r.metrics["ttft-p95"], s.gpus(n), str(s.key)))  # fmt: skip
        out.append(min(found) if found else None)
    return out


def _series(tiered: bool = True):  # type: ignore[no-untyped-def]
    shape = resolve_model("llama-3-8b")
    reps = [replica_of(d, shape, 512, "bf16", from_roofline(shape, GPUS[d[:4]]))
            for d in ("h100x1", "h200x1", "h100x2")]  # fmt: skip
    return series_of(reps, ("round-robin", "session"), Prices(), 512, tiered=tiered)


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_the_search_finds_what_every_count_finds(data) -> None:  # noqa: ANN001
    """Any TTFT that falls with replicas: the bisection with dominance finds the cheapest
    fleet that simulating every series at every count finds."""
    series = _series()
    base = {s.key: data.draw(st.floats(0.5, 400.0)) for s in series}
    power = {s.key: data.draw(st.floats(0.3, 2.0)) for s in series}
    slo = parse_slo(f"ttft-p95={data.draw(st.floats(0.2, 50.0))}")
    calls = []

    def run(probes):  # type: ignore[no-untyped-def]
        calls.extend(probes)
        return [Result(0.0, {"ttft-p95": base[p.series.key] / p.replicas ** power[p.series.key],
                             "ttft-p99": 0.0, "tpot-p95": 0.0}) for p in probes]  # fmt: skip

    groups = [Group(1.0, True, tuple(series))]
    out = search(groups, slo, run)[0]
    expected = _brute(groups, slo, run)[0]
    if expected is None:
        assert out.best is None and out.closest is not None
    else:
        b = out.best
        assert b is not None
        got = (
            round(b.usd_per_hour, 9),
            b.result.metrics["ttft-p95"],
            b.gpus,
            str(b.probe.series.key),
        )
        assert got == expected
    searched = len(calls) - len(series) * MAX_REPLICAS  # brute force's own calls
    assert searched == len(out.fleets) and len(out.fleets) < len(series) * 8
    assert out.non_monotone == 0


def test_on_a_real_trace_the_search_equals_every_count(loaded) -> None:  # noqa: ANN001
    trace, traffic = loaded
    slo = parse_slo("ttft-p95=1")
    shared = Shared(trace, traffic, slo, windows=split(trace, WHOLE))
    few = [s for s in _series(tiered=False) if s.replica.deployment != "h100x2"]
    groups = [Group(200.0, True, tuple(few[:3]))]

    def run(probes):  # type: ignore[no-untyped-def]
        # the whole trace as one window: a fleet that misses stops there (its figures bounds)
        return [combine(slo, p, [(0, simulate_window(shared, p, 0))]) for p in probes]

    outs = search(groups, slo, run)
    expected = _brute(groups, slo, run)
    for o, e in zip(outs, expected, strict=True):
        assert e is not None and o.best is not None, "the SLO should be met by some count"
        assert (round(o.best.usd_per_hour, 9), o.best.result.metrics["ttft-p95"]) == e[:2]
        assert o.best.probe.replicas > 1, "a load where one replica is not enough"


# ---------------------------------------------------------------- the command


def test_the_command_writes_both_tables_and_answers_in_gpus(
    small: Path, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    import shutil

    wh = tmp_path / "wh.duckdb"
    shutil.copy(small, wh)
    assert main(["plan", "--warehouse", str(wh), "--deployments", "h100x1,h200x1", "--model",
                 "llama-3-8b", "--slo", "ttft-p95=1", "--load-scale", "100,200"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    answers = rows(wh, "SELECT load_scale, prefix_caching, met, gpus, usd_per_hour, "
                       "gpus_saved, usd_saved_per_month, fleets_searched "
                       "FROM latest_plan_slo_answers "
                       "ORDER BY 1, 2 DESC")  # fmt: skip
    assert [(a[0], a[1]) for a in answers] == [(100, True), (100, False), (200, True), (200, False)]
    for on, off in (answers[0:2], answers[2:4]):
        assert on[2] and off[2]
        assert on[5] == off[3] - on[3]
        assert on[6] == pytest.approx((off[4] - on[4]) * HOURS_PER_MONTH)
        assert on[4] <= off[4] + 1e-9  # caching off is a subset of what caching on can do
    fleets = rows(wh, "SELECT load_scale, prefix_caching, count(*) FROM latest_plan_slo_fleets "
                      "GROUP BY ALL ORDER BY 1, 2 DESC")  # fmt: skip
    assert [f[2] for f in fleets] == [a[7] for a in answers]
    # every fleet fits its HBM: pool + weights within the budget, from the catalog by hand
    weights_gib = 8.03e9 * 2 / 2**30  # Llama-3-8B's 8.03 B parameters in bf16
    found = rows(wh, "SELECT DISTINCT deployment, kv_pool_gib_per_gpu, tp, gpus, replicas "
                     "FROM plan_slo_fleets")  # fmt: skip
    for deployment, kv, tp, gpus, n in found:
        hbm = GPUS[deployment[:4]].hbm_gib
        assert 0 < kv < hbm * GPU_MEMORY_UTILIZATION - weights_gib + 0.1
        assert gpus == n * tp
    assert "× H100" in out or "× H200" in out
    assert "Searched:" in out and "latest_plan_slo_fleets" in out
    # searched on the vllm pool (the default: fleets that can exist), whose answers need no
    # word of being a lower bound, here or on the page; an ideal search's say it once
    assert rows(wh, "SELECT DISTINCT engine FROM latest_plan_slo_fleets") == [("vllm",)]
    assert out.count(IDEAL_CAVEAT) == 0
    with duckdb.connect(str(wh), read_only=True) as con:
        assert from_warehouse(con).count(IDEAL_CAVEAT) == 0
        stored = con.sql("SELECT * FROM latest_plan_slo_answers").to_arrow_table().to_pylist()
    for engine, said in (("ideal", 1), ("vllm", 0), ("sglang", 0), (None, 0)):
        assert sentences(stored, "llama-3-8b", {}, engine).count(IDEAL_CAVEAT) == said
        brief = short(stored, "llama-3-8b", engine)  # the summary's line says it in words
        assert brief is not None and brief.startswith("at least ") == bool(said)
    with duckdb.connect(str(wh)) as con:  # the page of a search stored as ideal's
        con.execute("UPDATE plan_slo_fleets SET engine = 'ideal'")
        assert from_warehouse(con).count(IDEAL_CAVEAT) == 1


def test_each_window_sized_alone_costs_no_more_than_the_static_answer(
    small: Path, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    """``--per-window``: every window's cheapest fleet, searched alone, is no dearer than the
    answer held in every window (which meets in each), so window by window the dollars never
    exceed the static fleet's; the GPU-hours stored are the windows' own, summed."""
    import shutil

    wh = tmp_path / "wh.duckdb"
    shutil.copy(small, wh)
    assert main(["plan", "--warehouse", str(wh), "--deployments", "h100x1", "--model",
                 "llama-3-8b", "--slo", "ttft-p95=1", "--load-scale", "100", "--slo-window",
                 "60", "--per-window"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    answers = rows(wh, "SELECT prefix_caching, met, windows, usd_per_hour, gpu_hours_static, "
                       "gpu_hours_per_window, windows_unmet_alone, gpus "
                       "FROM latest_plan_slo_answers")  # fmt: skip
    assert len(answers) == 2
    for caching, met, n_windows, usd, static_h, scaled_h, unmet, gpus in answers:
        assert met and n_windows > 2
        every = rows(wh, "SELECT prefix_caching, window_start_s, window_end_s, met, gpus, "
                         "usd_per_hour FROM latest_plan_slo_windows")  # fmt: skip
        got = [w[1:] for w in every if w[0] == caching]
        assert len(got) == n_windows
        assert sum(not m for _, _, m, _, _ in got) == unmet
        hours = [(end - start) / 3600 for start, end, *_ in got]
        assert scaled_h == pytest.approx(
            sum(h * (g if m else gpus) for h, (_, _, m, g, _) in zip(hours, got, strict=True))
        )
        assert static_h == pytest.approx(gpus * (got[-1][1] - got[0][0]) / 3600)
        for _, _, m, _, window_usd in got:
            assert not m or window_usd <= usd + 1e-9
    assert "Window by window" in out and "GPU-hours against" in out


@pytest.mark.parametrize(
    ("engine", "store_alone"), [("ideal", True), ("vllm", True), ("sglang", False)]
)
def test_every_engine_is_searched_with_its_tiers(engine: str, store_alone: bool) -> None:
    """Every engine's caching-on search has DRAM tiers and a store (the search once gave the
    pools the tiers they refused, and ``plan --slo --engine vllm`` never ran); SGLang writes
    its store from host memory, so its search has no store without a DRAM tier."""
    shape = resolve_model("deepseek-v3")
    replica = replica_of("h200x8", shape, 512, "bf16", from_roofline(shape, GPUS["h200"], tp=8))
    settings = PlanSloSettings(slo="ttft-p95=5", deployments=("h200x8",), engine=engine)
    groups = search_groups([replica], settings, Prices(), 512)
    on = [s for g in groups if g.prefix_caching for s in g.series]
    off = [s for g in groups if not g.prefix_caching for s in g.series]
    assert on and off and all(s.dram_gib == 0 and s.store_gib is None for s in off)
    assert any(s.dram_gib and s.store_gib is not None for s in on)
    assert any(s.dram_gib and s.store_gib is None for s in on)
    assert any(not s.dram_gib and s.store_gib is not None for s in on) is store_alone


def test_a_target_no_fleet_meets_is_said_in_words(small: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import shutil

    wh = tmp_path / "wh.duckdb"
    shutil.copy(small, wh)
    assert main(["plan", "--warehouse", str(wh), "--deployments", "l40s", "--model",
                 "llama-3-8b", "--slo", "ttft-p95=0.0001"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "no fleet searched meets ttft-p95=0.0001" in out and "the closest" in out
    assert rows(wh, "SELECT met FROM latest_plan_slo_answers") == [(False,), (False,)]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--slo", "ttfb-p95=2"], "unknown SLO target"),
        (["--slo", "ttft-p95=0"], "above 0"),
        (["--slo", "ttft-p95=-1"], "above 0"),
        (["--slo", "ttft-p95=nan"], "above 0"),
        (["--slo", "ttft-p100=2"], "percentile"),
        (["--slo", "ttft-p95=2,ttft-p95=3"], "given twice"),
        (["--slo", "ttft-p95=2", "--prices", "{neg}"], "gpu_hour"),
        (["--slo", "ttft-p95=2", "--prices", "{nan}"], "dram_gb_hour"),
        (["--slo", "ttft-p95=2", "--deployments", "h999x1"], "unknown GPU"),
        (["--slo", "ttft-p95=2", "--deployments", "h100x1", "--model", "deepseek-v3"],
         "does not fit on h100x1"),
        (["--deployments", "h100x1"], "go together"),
        (["--slo", "ttft-p95=2"], "go together"),
        (["--slo", "ttft-p95=2", "--deployments", "h100x1", "--engine", "tgi"],
         "unknown engine 'tgi'"),
        (["--slo", "ttft-p95=2", "--deployments", "h100x1", "--engine", "vllm,ideal"],
         "one engine at a time"),
        (["--slo", "ttft-p95=2", "--per-window", "--slo-window", "all"], "sizes each SLO window"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(
    small: Path, tmp_path: Path, capsys, flags: list[str], says: str
) -> None:  # noqa: ANN001
    (tmp_path / "neg.toml").write_text("gpu_hour = -1.0\n")
    (tmp_path / "nan.toml").write_text("dram_gb_hour = nan\n")
    flags = [f.format(neg=tmp_path / "neg.toml", nan=tmp_path / "nan.toml") for f in flags]
    if "--deployments" not in flags and "go together" not in says:
        flags += ["--deployments", "h100x1"]
    before = rows(small, "SELECT count(*) FROM runs")
    assert main(["plan", "--warehouse", str(small), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and " — " in err, err
    assert err.startswith("prefixscope plan: error:")
    assert rows(small, "SELECT count(*) FROM runs") == before
    assert rows(small, "SELECT count(*) FROM plan_slo_fleets") == [(0,)]


def test_a_pool_short_of_the_longest_request_is_named_before_any_fleet(
    small: Path, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    """On the default ``vllm`` pool each request must fit a replica's pool alone (an engine
    refuses a longer context at start-up): a deployment that cannot hold the longest request
    is named, in one line, with what to do; ``ideal``, whose pool holds no running request,
    searches it."""
    import shutil

    wh = tmp_path / "wh.duckdb"
    shutil.copy(small, wh)
    gpu = tmp_path / "tiny.toml"  # llama-3-8b leaves it 7 blocks of 512 tokens
    gpu.write_text('name = "tiny"\ntflops = 100\ntbps = 1.0\nhbm_gib = 19\n')
    argv = ["plan", "--warehouse", str(wh), "--deployments", f"h100x1,{gpu}x1", "--model",
            "llama-3-8b", "--slo", "ttft-p95=5"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    with warehouse.connect(wh, read_only=True) as con:
        trace, traffic = load_trace(con), load_traffic(con)
    bs = trace.block_size
    longest = max(  # each request's prompt blocks, or its tokens but the last, in blocks
        max(nb, -(-(inp + max(out, 1) - 1) // bs))
        for nb, inp, out in zip(trace.blocks_per_request.tolist(), trace.input_tokens.tolist(),
                                traffic.output_tokens.tolist(), strict=True)
    )  # fmt: skip
    assert longest > 7
    assert f"longest request holds {longest:,} blocks" in err and "tinyx1's 7 blocks" in err, err
    assert "h100x1" not in err and "--engine ideal" in err, err
    assert rows(wh, "SELECT count(*) FROM plan_slo_fleets") == [(0,)]
    assert main([*argv, "--engine", "ideal"]) == 0
    assert rows(wh, "SELECT DISTINCT engine FROM plan_slo_fleets") == [("ideal",)]

"""The SLO held window by window (``analysis/plan/windows.py``, ``held.py``): windows and the
busiest one, the count that decides a percentile, a fleet stopped once it misses, and the search
on a trace of a few hours with one busy hour."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope import warehouse
from prefixscope.analysis.cost.gpus import GPUS
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.run import Fleet, Stop, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.plan.probe import cut, fleet_of
from prefixscope.analysis.plan.search import Probe
from prefixscope.analysis.plan.slo import allowed_exceeding, parse_slo
from prefixscope.analysis.plan.space import replica_of
from prefixscope.analysis.plan.windows import WHOLE, busiest, parse_window, split
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.cli import main
from prefixscope.stages import plan_slo
from tests.conftest import mooncake_line

HOUR = 3600.0


def trace_at(times: list[float], tokens: list[int] | None = None):  # type: ignore[no-untyped-def]
    n = len(times)
    tokens = tokens or [512] * n
    return build_trace([[i] for i in range(n)], tokens, ["t"] * n, 512, times=times)


# ---------------------------------------------------------------- windows


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600.0), ("3600s", 3600.0), ("60m", 3600.0), ("1h", 3600.0), (" 90 ", 90.0),
     ("all", WHOLE), ("ALL", WHOLE)],
)  # fmt: skip
def test_a_window_parses_to_seconds(text: str, seconds: float) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["59", "0", "-1h", "nan", "inf", "1e99", "h", "", "whole", "1y"])
def test_a_bad_window_is_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="--slo-window takes") as caught:
        parse_window(text)
    assert " — " in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("times", "window", "expected"),
    [
        # one window: a trace shorter than a window is searched whole, cold
        ([0, 10, 3000], HOUR, [(0, 3, 0)]),
        ([0, 10, 3000], WHOLE, [(0, 3, 0)]),
        # windows at multiples of the length from the first arrival, each warmed by the one
        # before; an empty hour sets nothing and is left out
        ([0, 100, 3700, 3800, 11000], HOUR, [(0, 2, 0), (2, 4, 0), (4, 5, 4)]),
        ([0, 3599.9, 3600, 7199, 7200], HOUR, [(0, 2, 0), (2, 4, 0), (4, 5, 2)]),
    ],
)  # fmt: skip
def test_windows_and_their_warm_ups(times: list, window: float, expected: list) -> None:
    got = split(trace_at([float(t) for t in times]), window)
    assert [(w.first, w.end, w.warm) for w in got] == expected
    assert [w.index for w in got] == list(range(len(got)))
    assert sum(w.requests for w in got) == len(times)


def test_the_busiest_window_has_the_most_arriving_tokens() -> None:
    times = [0.0, 10.0, 3700.0, 3800.0, 3900.0, 7300.0]
    tokens = [9000, 9000, 1000, 1000, 1000, 20000]
    windows = split(trace_at(times, tokens), HOUR)
    assert [w.tokens for w in windows] == [18000, 3000, 20000]
    assert busiest(windows).index == 2
    tie = split(trace_at([0.0, 3700.0], [5, 5]), HOUR)
    assert busiest(tie).index == 0  # the earliest among equals


# ---------------------------------------------------------------- the count that decides


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.sampled_from([50.0, 90.0, 95.0, 99.0, 99.9]), st.data())
def test_the_count_that_decides_a_percentile_is_exact(n: int, pct: float, data) -> None:  # noqa: ANN001
    """``allowed_exceeding(n, p)`` values above a limit make the percentile exceed it whatever
    the others are; one fewer can leave it within the limit."""
    k = allowed_exceeding(n, pct)
    assert 1 <= k <= n
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    above = rng.uniform(1.0 + 1e-9, 5.0, k)
    below = rng.uniform(0.0, 1.0, n - k)
    assert np.percentile(np.concatenate([above, below]), pct) > 1.0
    # k - 1 just above the limit, every other value at 0: the percentile is within it
    fewer = np.concatenate([np.full(k - 1, 1.0 + 1e-9), np.zeros(n - k + 1)])
    assert np.percentile(fewer, pct) <= 1.0


# ---------------------------------------------------------------- a fleet stopped once missed


def _busy_trace():  # type: ignore[no-untyped-def]
    """Four hours of requests of 8 blocks, the third hour at five times the others' rate."""
    rng = np.random.default_rng(7)
    times = []
    for hour, rate in enumerate([0.5, 0.5, 2.5, 0.5]):  # requests a second
        n = int(rate * HOUR)
        times += sorted((hour * HOUR + rng.uniform(0, HOUR, n)).tolist())
    n = len(times)
    prefixes = rng.integers(0, 40, n)
    hashes = [[int(p) * 1000 + k for k in range(2)] + [10**6 + i * 10 + k for k in range(6)]
              for i, p in enumerate(prefixes)]  # fmt: skip
    return build_trace(hashes, [8 * 512] * n, ["t"] * n, 512, times=times), n


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The busy trace as a warehouse (Mooncake lines, 40 output tokens each)."""
    trace, n = _busy_trace()
    ids = trace.hashes[trace.blocks]
    lines = [
        mooncake_line(int(trace.times[i] * 1000), 8 * 512, 40,
                      [int(h) for h in ids[trace.offsets[i] : trace.offsets[i + 1]]])
        for i in range(n)
    ]  # fmt: skip
    folder = tmp_path_factory.mktemp("busy")
    (folder / "log.jsonl").write_text("\n".join(lines) + "\n")
    wh = folder / "wh.duckdb"
    assert main(["ingest", "--format", "mooncake", "--input", str(folder / "log.jsonl"),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    return wh


@pytest.fixture(scope="module")
def loaded(busy: Path):  # type: ignore[no-untyped-def]
    with warehouse.connect(busy, read_only=True) as con:
        return load_trace(con), load_traffic(con)


def _engine():  # type: ignore[no-untyped-def]
    shape = resolve_model("llama-3-8b")
    return replica_of("h100x1", shape, 512, "bf16", from_roofline(shape, GPUS["h100"]))


@pytest.mark.parametrize("load", [30.0, 60.0])
def test_a_fleet_stopped_once_missed_misses_in_full(loaded, load: float) -> None:  # noqa: ANN001
    """An overloaded fleet stops early, and its full run misses the same target; the stop
    never changes a run it does not end."""
    trace, traffic = loaded
    rep = _engine()
    fleet = Fleet("round-robin", 1, rep.kv_pool_blocks, load_scale=load)
    full = simulate_fleet(trace, traffic, fleet, rep.engine)
    limit = 2.0
    rule = Stop(0, ((limit, allowed_exceeding(trace.n_requests, 95.0)),))
    stopped = simulate_fleet(trace, traffic, fleet, rep.engine, stop=rule)
    assert 0 < stopped.stopped_at < trace.n_requests
    assert np.percentile(full.ttft, 95) > limit
    # what it ran before the stop is the full run's, to the bit
    done = stopped.ttft[: stopped.stopped_at] > 0
    assert np.array_equal(stopped.ttft[: stopped.stopped_at][done],
                          full.ttft[: stopped.stopped_at][done])  # fmt: skip
    loose = simulate_fleet(trace, traffic, fleet, rep.engine, stop=Stop(0, ((1e9, 1),)))
    assert loose.stopped_at == -1 and np.array_equal(loose.ttft, full.ttft)


# ---------------------------------------------------------------- held in every hour


def test_the_answer_holds_in_every_hour_and_one_fewer_misses_the_busy_one(
    busy: Path, loaded
) -> None:  # noqa: ANN001
    trace, traffic = loaded
    slo_text = "ttft-p95=1"
    settings_ = plan_slo.PlanSloSettings(
        deployments=("h100x1",), slo=slo_text, model="llama-3-8b", routers=("round-robin",),
        load_scales=(40.0,),
    )  # fmt: skip
    result = plan_slo.plan_for_slo(busy, settings_)
    searched = result.searched
    assert searched is not None and len(searched.windows) == 4
    assert searched.busiest.index == 2
    on = result.answers.to_pylist()[0]
    assert on["met"] and on["windows"] == 4 and on["windows_checked"] == 4
    assert on["window_s"] == HOUR and on["windows_searched"] >= 1
    best = searched.outcomes[0].best
    assert best is not None
    slo = parse_slo(slo_text)
    # the answer over the whole trace, measured hour by hour
    fleet = fleet_of(best.probe)
    whole = simulate_fleet(trace, traffic, fleet, best.probe.series.replica.engine)
    for w in searched.windows:
        assert np.percentile(whole.ttft[w.first : w.end], 95) <= 1.0, w
    # one replica fewer misses in the busy hour
    fewer = Probe(0, best.probe.series, best.probe.replicas - 1, 40.0, True)
    w = searched.windows[2]
    part_trace, part_traffic = cut(trace, traffic, w.warm, w.end, True)
    o = simulate_fleet(part_trace, part_traffic, fleet_of(fewer), best.probe.series.replica.engine)
    assert not slo.meets({"ttft-p95": float(np.percentile(o.ttft[w.first - w.warm :], 95))})
    # the page and the warehouse say which window bound it
    assert on["bound_window_start_s"] in {x.start_s for x in searched.windows}
    assert math.isclose(on["bound_window_end_s"] - on["bound_window_start_s"], HOUR)


@pytest.mark.parametrize(
    ("gpus", "static", "scaled"),
    [
        ([8, 12], 16, 10.0),  # two half-hours: 4 + 6 GPU-hours
        ([8, None], 16, 12.0),  # a window no fleet meets alone: at the static answer's 16
        ([8, 12], None, 10.0),  # no static answer, every window met: still a total
        ([8, None], None, None),  # nothing to count the unmet window at: no total
    ],
)
def test_gpu_hours_count_an_unmet_window_at_the_static_answer_or_give_no_total(
    gpus: list, static: int | None, scaled: float | None
) -> None:
    from types import SimpleNamespace

    from prefixscope.analysis.plan.per_window import Sized, gpu_hours

    group = SimpleNamespace(load_scale=1.0, prefix_caching=True)
    sized = [
        Sized(group, SimpleNamespace(start_s=i * 1800.0, end_s=(i + 1) * 1800.0),  # type: ignore[arg-type]
              None if g is None else SimpleNamespace(gpus=g))  # type: ignore[arg-type]
        for i, g in enumerate(gpus)
    ]  # fmt: skip
    (hours,) = gpu_hours(sized, {(1.0, True): static})
    assert hours.scaled == (None if scaled is None else pytest.approx(scaled))
    assert hours.static == (None if static is None else pytest.approx(static * 1.0))
    assert hours.windows_unmet == sum(g is None for g in gpus)


@pytest.mark.parametrize(("engine", "longest"), [("ideal", 3), ("vllm", 1)])
def test_a_pool_checks_its_answer_in_shorter_runs(
    busy: Path, monkeypatch: pytest.MonkeyPatch, engine: str, longest: int
) -> None:
    """The check's runs of windows are bounded by lookups, tighter under a KV pool caching,
    whose replicas hold more per block (``held.POOL_RUN_LOOKUPS``): here a bound no window
    fits under ``vllm`` with caching on, so each window is a run of its own, and none under
    ``ideal`` or with caching off (a pool then holds no node per block), so the three windows
    not searched are one run."""
    from prefixscope.analysis.plan import slo_plan

    monkeypatch.setattr(slo_plan, "RUN_LOOKUPS", 10**9)
    monkeypatch.setattr(slo_plan, "POOL_RUN_LOOKUPS", 1)
    runs: dict[bool, list[tuple[int, ...]]] = {True: [], False: []}
    real = slo_plan.probe_task

    def spied(shared, task):  # type: ignore[no-untyped-def]
        if not task.search:
            runs[task.probe.prefix_caching].append(task.measured)
        return real(shared, task)

    monkeypatch.setattr(slo_plan, "probe_task", spied)
    settings_ = plan_slo.PlanSloSettings(
        deployments=("h100x1",), slo="ttft-p95=1", model="llama-3-8b", routers=("round-robin",),
        load_scales=(40.0,), engine=engine,
    )  # fmt: skip
    result = plan_slo.plan_for_slo(busy, settings_)
    assert result.answers.to_pylist()[0]["windows_checked"] == 4
    assert runs[True] and max(len(r) for r in runs[True]) == longest
    assert runs[False] and max(len(r) for r in runs[False]) == 3

"""A stale router view (``--router-delay``, ``fleet/_stale.py``): kv-aware routing on the
caches as they were Δ ago. A delay shorter than any gap between arrivals is today's fleet to
the token under every engine; an endless one routes on empty caches, toward round-robin; a
ring too small for the changes pending still keeps every token in the budget."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet import run
from prefixscope.analysis.fleet.budget import PARTS, per_request
from prefixscope.analysis.fleet.run import Engine, Fleet, Traffic, simulate_fleet
from prefixscope.analysis.fleet.settings import FleetSettings
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.cli import main

MODEL = resolve_model("llama-3-8b")
ENGINE = Engine(
    from_roofline(MODEL, resolve_gpu("h100")), kv_bytes_per_token=MODEL.kv_bytes_per_token()
)
STALE = PARTS.index("stale_router_view")


@pytest.fixture(scope="module")
def spread(bundled_trace):  # type: ignore[no-untyped-def]
    """The bundled hour's requests 0.3 s apart, every arrival at its own instant."""
    return replace(bundled_trace, times=np.arange(bundled_trace.n_requests) * 0.3)


def _traffic(trace) -> Traffic:  # type: ignore[no-untyped-def]
    return Traffic(np.full(trace.n_requests, 64, np.int64))


@pytest.mark.parametrize(
    ("engine", "policy"), [("ideal", "lru"), ("ideal", "lfu"), ("ideal", "s3fifo"), ("vllm", "lru"),
                           ("sglang", "lru")]
)  # fmt: skip
def test_a_delay_shorter_than_every_gap_is_a_fresh_view(spread, engine: str, policy: str) -> None:  # type: ignore[no-untyped-def]
    fresh, late = (
        simulate_fleet(
            spread,
            _traffic(spread),
            Fleet("kv-aware", 4, 2_000, policy, engine=engine, router_delay_s=d),
            ENGINE,
            budget=True,
        )  # fmt: skip
        for d in (0.0, 1e-6)
    )
    for name in ("replica", "hit_tokens", "ttft", "source_tokens"):
        np.testing.assert_array_equal(getattr(late, name), getattr(fresh, name), err_msg=name)
    assert late.miss is not None and fresh.miss is not None
    np.testing.assert_array_equal(late.miss, fresh.miss)
    assert late.view_early == 0


def test_an_endless_delay_routes_on_empty_caches(bundled_trace) -> None:  # type: ignore[no-untyped-def]
    traffic = _traffic(bundled_trace)

    def hit(fleet: Fleet) -> tuple[float, np.ndarray]:
        o = simulate_fleet(bundled_trace, traffic, fleet, ENGINE, budget=True)
        parts = per_request(o)
        np.testing.assert_array_equal(parts.sum(axis=1), bundled_trace.input_tokens)
        return o.hit_tokens.sum() / bundled_trace.input_tokens.sum(), parts.sum(axis=0)

    (fresh, fresh_parts), (never, never_parts) = (
        hit(Fleet("kv-aware", 4, 4_000, router_delay_s=d)) for d in (0.0, 1e12)
    )
    round_robin, _ = hit(Fleet("round-robin", 4, 4_000))
    assert fresh_parts[STALE] == 0
    assert never < fresh - 0.05  # the view lost most of what kv-aware wins
    assert abs(never - round_robin) < 0.01
    # what the view lost is where a fresh one would have sent it
    assert never_parts[STALE] / bundled_trace.input_tokens.sum() > 0.05


def test_a_full_ring_reaches_the_view_early_and_is_counted(spread, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(run, "LOG_CAPACITY", 8)
    o = simulate_fleet(
        spread, _traffic(spread), Fleet("kv-aware", 2, 2_000, router_delay_s=60.0), ENGINE,
        budget=True,
    )  # fmt: skip
    assert o.view_early > 0
    np.testing.assert_array_equal(per_request(o).sum(axis=1), spread.input_tokens)


@pytest.mark.parametrize(
    ("fleet", "message"),
    [
        (Fleet("round-robin", 2, 10, router_delay_s=1.0), "kv-aware"),
        (Fleet("cache-aware", 2, 10, router_delay_s=1.0), "its own tree"),
        (Fleet("kv-aware", 2, 10, router_delay_s=-1.0), "seconds ≥ 0"),
        (Fleet("kv-aware", 2, 10, router_delay_s=float("nan")), "seconds ≥ 0"),
        (Fleet("kv-aware", 2, 10, router_delay_s=float("inf")), "seconds ≥ 0"),
    ],
)
def test_a_delay_is_refused_where_it_means_nothing(fleet: Fleet, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fleet.check()


def test_the_grid_lags_kv_aware_alone() -> None:
    grid = FleetSettings(routers=("round-robin", "kv-aware"), router_delays=(0.0, 0.1)).grid([100])
    assert sorted((f.router, f.router_delay_s) for f in grid) == [
        ("kv-aware", 0.0), ("kv-aware", 0.1), ("round-robin", 0.0)
    ]  # fmt: skip
    with pytest.raises(ValueError, match="add --router kv-aware"):
        FleetSettings(routers=("round-robin",), router_delays=(0.1,)).check()


@pytest.mark.parametrize("text", ["-5", "nan", "inf", "1e13", "5,5", "ms"])
def test_the_flag_refuses_what_is_not_a_delay(text: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["fleet", "--router", "kv-aware", "--router-delay", text]) == 2
    assert "argument --router-delay" in capsys.readouterr().err


def test_the_command_says_when_the_view_was_fresher_than_asked(  # type: ignore[no-untyped-def]
    bundled_warehouse, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(run, "LOG_CAPACITY", 16)
    wh = str(bundled_warehouse.copy_to(tmp_path))
    assert main(["fleet", "--warehouse", wh, "--router", "kv-aware", "--replicas", "2",
                 "--capacity-blocks", "1000", "--router-delay", "60000",
                 "--no-miss-budget"]) == 0  # fmt: skip
    assert "reached the router's view before they were that old" in capsys.readouterr().out

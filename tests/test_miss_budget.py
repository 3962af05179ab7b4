"""The fleet's miss budget: every prompt token in one part, each part where its rule puts it
(hand-made traces, one case a part), and on the bundled hour the parts adding up to the prompt
tokens under every router and engine, the unbounded cache's miss equal to what was never seen."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.budget import PARTS, per_request
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.fleet.run import Engine, Fleet, Tiers, Traffic, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.policies.ceiling import leading_runs
from prefixscope.analysis.trace.csr import build_trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.measure import hit_tokens

MODEL = resolve_model("llama-3-8b")
ENGINE = Engine(
    from_roofline(MODEL, resolve_gpu("h100")), kv_bytes_per_token=MODEL.kv_bytes_per_token()
)
BS = 16


def budget_of(hashes, tokens, fleet: Fleet, gap_s: float = 1.0) -> list[dict[str, int]]:  # type: ignore[no-untyped-def]
    """Each request's parts (only those above 0), the requests ``gap_s`` apart."""
    trace = build_trace(
        hashes, tokens, ["t"] * len(hashes), BS, times=[i * gap_s for i in range(len(hashes))]
    )
    out = simulate_fleet(trace, Traffic(np.ones(len(hashes), np.int64)), fleet, ENGINE, budget=True)
    parts = per_request(out)
    np.testing.assert_array_equal(parts.sum(axis=1), trace.input_tokens)
    return [{p: int(v) for p, v in zip(PARTS, row, strict=True) if v} for row in parts]


SLOW_DRAM = Tiers(dram_blocks=10, dram_gbps=1e-6)  # copying costs more than recomputing

CASES = [
    # (what, prompts, tokens, fleet, the last request's parts)
    ("first sight", [[1, 2]], [32], Fleet("round-robin", 1, 10), {"never_seen": 32}),
    ("a hit", [[1, 2], [1, 2, 3]], [32, 48], Fleet("round-robin", 1, 10),
     {"hit_hbm": 32, "never_seen": 16}),
    ("evicted by capacity", [[1, 2], [3, 4], [1, 2]], [32] * 3, Fleet("round-robin", 1, 2),
     {"evicted": 32}),
    ("on another replica", [[1, 2], [1, 2]], [32, 32], Fleet("round-robin", 2, 10),
     {"other_replica": 32}),
    # LRU keeps block 2 (refreshed by the second prompt) and evicts block 1 at the fourth
    ("behind a miss", [[1, 2], [3, 2], [4], [1, 2]], [32, 32, 16, 32],
     Fleet("round-robin", 1, 3), {"evicted": 16, "behind_a_miss": 16}),
    ("a slow tier recomputed", [[1, 2, 3], [1, 2, 3]], [48, 48],
     Fleet("round-robin", 1, 1, tiers=SLOW_DRAM), {"hit_hbm": 16, "slower_tier_recomputed": 32}),
    # vllm never caches a partial block: its 8 tokens are computed whatever is cached
    ("a partial block under vllm", [[1, 2, 3], [1, 2, 3]], [40, 40],
     Fleet("round-robin", 1, 100, engine="vllm"), {"hit_hbm": 32, "always_computed": 8}),
    ("a partial block under sglang", [[1, 2, 3]], [40],
     Fleet("round-robin", 1, 100, engine="sglang"), {"never_seen": 32, "always_computed": 8}),
    # the router sees replica 0's cache 10 s late: both replicas look empty, the load ties, and
    # the tie goes to replica 1; a fresh view would have sent it to replica 0
    ("seen late by the router", [[1, 2], [1, 2, 3]], [32, 48],
     Fleet("kv-aware", 2, 10, router_delay_s=10.0), {"stale_router_view": 32, "never_seen": 16}),
    ("seen in time by the router", [[1, 2], [1, 2, 3]], [32, 48],
     Fleet("kv-aware", 2, 10, router_delay_s=0.5), {"hit_hbm": 32, "never_seen": 16}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("prompts", "tokens", "fleet", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_each_part_is_where_its_rule_puts_it(prompts, tokens, fleet, expected) -> None:  # type: ignore[no-untyped-def]
    assert budget_of(prompts, tokens, fleet)[-1] == expected


def test_a_fleet_run_without_a_budget_keeps_none() -> None:
    trace = build_trace([[1, 2]], [32], ["t"], BS)
    out = simulate_fleet(trace, Traffic(np.ones(1, np.int64)), Fleet("round-robin", 1, 4), ENGINE)
    assert out.miss is None
    with pytest.raises(ValueError, match="no miss budget"):
        per_request(out)


@pytest.fixture(scope="module")
def hour(bundled_warehouse, bundled_trace):  # type: ignore[no-untyped-def]
    from prefixscope import warehouse
    from prefixscope.analysis.fleet.traffic import load_traffic

    with warehouse.connect(bundled_warehouse.path, read_only=True) as con:
        return bundled_trace, load_traffic(con)


@pytest.mark.parametrize("engine", ["ideal", "vllm", "sglang"])
@pytest.mark.parametrize("router", list(ROUTERS))
def test_on_the_bundled_hour_the_parts_add_up_and_never_seen_is_the_ceilings_miss(
    hour, router: str, engine: str
) -> None:  # type: ignore[no-untyped-def]
    trace, traffic = hour
    fleet = Fleet(router, 4, 885, engine=engine)
    answers = simulate_fleet(trace, traffic, fleet, ENGINE, budget=True)
    seen = trace if engine == "ideal" else full_blocks_only(trace)  # what the engine hashes
    parts = per_request(answers)
    np.testing.assert_array_equal(parts.sum(axis=1), seen.input_tokens)
    ceiling_miss = seen.input_tokens - hit_tokens(seen, leading_runs(seen))
    floor = parts[:, PARTS.index("never_seen")] + parts[:, PARTS.index("always_computed")]
    assert ceiling_miss.sum() > 0
    if engine == "ideal":
        np.testing.assert_array_equal(floor, ceiling_miss)
        return
    # a pool also serves the answers it cached, which no earlier prompt named
    assert (floor <= ceiling_miss).all()
    closed = simulate_fleet(
        trace, traffic, fleet, replace(ENGINE, cache_answers=False), budget=True
    )
    np.testing.assert_array_equal(
        per_request(closed)[:, [PARTS.index("never_seen"), PARTS.index("always_computed")]].sum(1),
        ceiling_miss,
    )


def test_under_load_a_pool_misses_what_a_queued_request_has_not_computed_yet(hour) -> None:  # type: ignore[no-untyped-def]
    """Eight times the traffic: a request scheduled on one replica before an earlier one with
    the same prefix is computed on another finds it nowhere; the ideal cache, which caches at
    arrival, never does."""
    trace, traffic = hour
    pending = {
        engine: per_request(
            simulate_fleet(
                trace, traffic, Fleet("least-loaded", 4, 885, engine=engine, load_scale=8.0),
                ENGINE, budget=True,
            )
        )[:, PARTS.index("not_yet_cached")].sum()
        for engine in ("ideal", "vllm")
    }  # fmt: skip
    assert pending["ideal"] == 0
    assert pending["vllm"] > 0.01 * trace.input_tokens.sum()


def test_explain_in_a_fleet_names_each_blocks_part() -> None:
    """The 'behind a miss' case block by block: the first block evicted, the second cached
    behind it; the parts are the request's budget row."""
    from prefixscope.analysis.fleet.explain import explain_in_fleet

    hashes, tokens = [[1, 2], [3, 2], [4], [1, 2]], [32, 32, 16, 32]
    trace = build_trace(hashes, tokens, ["t"] * 4, BS, times=[0.0, 1.0, 2.0, 3.0])
    traffic = Traffic(np.ones(4, np.int64))
    why = explain_in_fleet(trace, traffic, Fleet("round-robin", 1, 3), ENGINE, 3)
    assert [b.part for b in why.blocks] == ["evicted", "behind_a_miss"]
    assert [b.lever for b in why.blocks] == ["memory", "eviction policy"]
    assert why.parts == {"evicted": 16, "behind_a_miss": 16} and why.hit_tokens == 0
    first = explain_in_fleet(trace, traffic, Fleet("round-robin", 1, 3), ENGINE, 1)
    # past the unbounded cache's run, a block seen before is the workload's floor too
    assert [b.part for b in first.blocks] == ["never_seen", "never_seen"]


def test_the_command_explains_a_request_of_the_bundled_hour_in_a_fleet(
    bundled_warehouse, capsys
) -> None:  # type: ignore[no-untyped-def]
    import json

    from prefixscope.cli import main

    wh = str(bundled_warehouse.path)
    request = "b8cbb061a85206d7:11237"
    args = ["explain", "--warehouse", wh, "--request", request, "--router", "round-robin",
            "--replicas", "4", "--capacity-blocks", "16000"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "router round-robin" in printed and "tokens by part:" in printed
    assert main([*args, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert sum(found["tokens_by_part"].values()) == found["input_tokens"]
    by_block: dict[str, int] = {}
    for b in found["blocks"]:
        by_block[b["part"]] = by_block.get(b["part"], 0) + b["tokens"]
    hits = sum(v for k, v in found["tokens_by_part"].items() if k.startswith("hit"))
    assert by_block.pop("hit", 0) == hits == found["hit_tokens"]
    assert by_block == {k: v for k, v in found["tokens_by_part"].items() if not k.startswith("hit")}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--router", "round-robin"], "give --capacity-blocks"),  # no fleet stored
        (["--router", "round-robin", "--capacity-blocks", "4", "--engine", "vllm"],
         "does not fit a KV pool"),
        (["--router", "kv-aware", "--replicas", "2", "--capacity-blocks", "400", "--policy",
          "belady"], "stateful router"),
    ],
)  # fmt: skip
def test_a_fleet_explain_that_cannot_run_says_why_in_one_line(
    bundled_warehouse, capsys, extra, message
) -> None:  # type: ignore[no-untyped-def]
    from prefixscope.cli import main

    args = ["explain", "--warehouse", str(bundled_warehouse.path), "--request",
            "b8cbb061a85206d7:11237", *extra]  # fmt: skip
    assert main(args) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_part_is_priced_at_what_serving_it_too_would_save() -> None:
    """Two requests on one replica: the second hits its first block and misses two more (one
    evicted, with capacity 1, the other never seen). Each unserved part's GPU-seconds is the
    step cost's prefill with it served too, alone; a hit part's is what it saved."""
    from prefixscope.analysis.fleet.budget import part_seconds

    big = 512  # past the step cost's knee: a part served is prefill saved
    trace = build_trace([[1, 2, 3], [1, 2, 4]], [3 * big] * 2, ["t"] * 2, big, times=[0.0, 1.0])
    out = simulate_fleet(
        trace, Traffic(np.ones(2, np.int64)), Fleet("round-robin", 1, 1), ENGINE, budget=True
    )
    seconds = part_seconds(trace, out, ENGINE.cost)
    t = ENGINE.cost.prefill_seconds
    parts = dict(zip(PARTS, per_request(out)[1].tolist(), strict=True))
    assert parts["hit_hbm"] == parts["evicted"] == parts["never_seen"] == big
    now = t(np.array([2.0 * big]), np.array([1.0 * big]))[0]
    for part in ("evicted", "never_seen"):
        want = now - t(np.array([1.0 * big]), np.array([2.0 * big]))[0]
        assert want > 0
        assert seconds[1, PARTS.index(part)] == pytest.approx(want, rel=1e-12)
    assert seconds[1, PARTS.index("hit_hbm")] == pytest.approx(out.source_saved_s[1, 0])
    assert seconds[1, PARTS.index("other_replica")] == 0.0  # no token there, nothing to win
    assert (seconds >= 0).all()

"""The SLO planner's disaggregated answer: the fewest replicas split into prefill and decode
pools that meet the SLO (``analysis/plan/disagg_plan.py``), beside the colocated answer."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from prefixscope.analysis.cost.deployment import parse_deployment
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.decode_pool import DecodePool
from prefixscope.analysis.fleet.disagg import Link, link_for, simulate_disagg
from prefixscope.analysis.fleet.run import Fleet
from prefixscope.analysis.fleet.stepcost import choose
from prefixscope.analysis.plan.disagg_plan import Span, search_disagg
from prefixscope.analysis.plan.slo import measure, parse_slo
from prefixscope.analysis.plan.space import replica_of
from prefixscope.analysis.plan.windows import busiest, split
from prefixscope.cli import main
from tests.test_fleet import sessions_trace


@pytest.fixture(scope="module")
def busy_replica():  # type: ignore[no-untyped-def]
    trace, traffic = sessions_trace(n_sessions=80, turns=4, seed=5, gap_s=0.05)
    shape, d = resolve_model("llama-3-8b"), parse_deployment("h100x1")
    replica = replica_of("h100x1", shape, trace.block_size, "bf16", choose(shape, d.gpu, 1))
    span = Span.of(trace, traffic, busiest(split(trace, float("inf"))))
    return span, replica


@pytest.mark.parametrize(
    ("slo", "load"),
    [("ttft-p95=0.4", 12.0), ("ttft-p95=0.6,tpot-p95=0.03", 4.0), ("tpot-p95=0.02", 12.0)],
)
def test_the_answer_is_the_fewest_replicas_that_meet(busy_replica, slo: str, load: float) -> None:  # type: ignore[no-untyped-def]
    span, replica = busy_replica
    target = parse_slo(slo)
    link = Link("x", 50.0)
    answer, tried, bound = search_disagg(
        span, replica, target, "least-loaded", "ideal", link, load, None
    )
    assert answer is not None and answer.meets
    total = answer.prefill + answer.decode
    # every fleet of fewer replicas that was tried missed, and every split of the answer's
    # size at or above the prefill floor was tried
    assert all(not t.meets for t in tried if t.prefill + t.decode < total)
    floor = min(t.prefill for t in tried)
    assert {t.prefill for t in tried if t.prefill + t.decode == total} == set(range(floor, total))
    # the answer's figures are the disaggregated fleet's own, simulated again
    fleet = Fleet("least-loaded", answer.prefill, replica.kv_pool_blocks, load_scale=load)
    pool = DecodePool(answer.decode, replica.kv_pool_blocks, span.trace.block_size,
                      replica.engine.cost, replica.engine.max_seqs)  # fmt: skip
    out = simulate_disagg(span.trace, span.traffic, fleet, replica.engine, pool, link,
                          replica.kv_bytes_per_gpu_token)  # fmt: skip
    m = span.measured
    again = measure(target, out.ttft[m], out.prefill.arrival[m], out.decoded.done_at[m],
                    np.asarray(span.traffic.output_tokens)[m])  # fmt: skip
    assert again == answer.metrics
    if not any(t.metric == "ttft" for t in target.targets):
        assert floor == 1  # no TTFT target: no prefill floor


def test_the_bundled_hour_gets_both_answers(bundled_warehouse, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    wh = bundled_warehouse.copy_to(tmp_path)
    assert main(["plan", "--warehouse", str(wh), "--deployments", "h200x8", "--model",
                 "deepseek-v3", "--slo", "ttft-p95=5", "--disagg"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "split into prefill and decode pools" in out
    with duckdb.connect(str(wh), read_only=True) as con:
        colocated = con.execute(
            "SELECT gpus, ttft_p95_s FROM latest_plan_slo_answers WHERE prefix_caching AND met"
        ).fetchall()
        split_row = con.execute(
            "SELECT met, gpus, prefill_replicas, decode_replicas, ttft_p95_s, colocated_gpus, "
            "gpus_fewer_than_colocated, link_gbps FROM latest_plan_slo_disagg"
        ).fetchall()
    ((gpus, ttft),) = colocated
    ((met, split_gpus, p, d, split_ttft, co_gpus, fewer, gbps),) = split_row
    assert ttft <= 5 and met and split_ttft <= 5  # each meets the SLO in its own row
    assert split_gpus == 8 * (p + d) and co_gpus == gpus and fewer == gpus - split_gpus
    assert gbps == link_for("rdma", parse_deployment("h200x8").gpu).gbps == 50.0


def test_plan_refuses_disagg_without_an_slo_and_a_bad_link(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    wh = tmp_path / "none.duckdb"
    assert main(["plan", "--warehouse", str(wh), "--disagg"]) == 2
    assert "--disagg applies to plan --slo" in capsys.readouterr().err
    assert main(["plan", "--warehouse", str(wh), "--deployments", "h100x1", "--slo",
                 "ttft-p95=1", "--disagg", "fast"]) == 2  # fmt: skip
    assert "a KV link is rdma, nvlink, inf or GB/s" in capsys.readouterr().err

"""The fleet_report flow's short answer: what `make demo` prints (at most 17 lines, Prefect's own
lines quieted), the markdown artifact each run publishes, and two scheduled runs on two hours of
logs adding to the trend."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import duckdb
import pytest

from prefixscope.analysis.cost.deployment import memory_split, parse_deployment
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.dashboards.summary import MAX_LINES
from tests.conftest import DemoRun
from tests.test_history import TENANTS, write_hour
from tests.test_report import figures

pytestmark = [pytest.mark.flow, pytest.mark.slow]


def test_the_demo_prints_a_short_answer_and_nothing_else(demo_run: DemoRun) -> None:
    # the demo's command is run once per session (conftest.demo_run), shared with
    # test_questions
    wh, page, out = demo_run.warehouse, demo_run.page, demo_run
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    assert len(lines) <= MAX_LINES, out.stdout
    text = out.stdout
    assert "INFO" not in text and "temporary server" not in text
    # the key figures: 12,031 Kimi requests, 2,792 synthetic ones and 1,064 of coding agents; the
    # ceiling; each policy at the priced capacity; the gap to belady; shared against salted;
    # the plan; the savings
    assert lines[0].startswith("trace:     15,887 requests (0 lines rejected) from 3 files")
    assert "5 tenants: kimi, claude-code" in lines[0]
    assert re.search(r"^ceiling: +62\.87% ", text, re.M)
    # the priced capacity is the KV pool of the fewest H200s that hold the flow's model
    # (deepseek-v3, the architecture of Kimi's published model: pipelines/served.py): eight
    pool = memory_split(resolve_model("deepseek-v3"), parse_deployment("h200x8"), block_size=512)
    with duckdb.connect(str(wh), read_only=True) as con:
        rate = dict(
            con.execute(
                "SELECT policy, token_hit_rate FROM latest_hit_rates WHERE tenant = '*' AND "
                "isolation = 'shared' AND measure_window = 'all' AND capacity_blocks = ?",
                [pool.kv_pool_blocks],
            ).fetchall()
        )
    lru, belady = (f"{rate[p]:.2%}".replace(".", r"\.") for p in ("lru", "belady"))
    at = f"{pool.kv_pool_blocks:,} blocks"
    assert re.search(rf"^policies: +at {at} .*lru {lru}.*belady {belady}", text, re.M)
    assert re.search(r"^gap: +to belady, the offline optimum", text, re.M)
    assert re.search(rf"^tenants: +lru shared {lru}, salted ", text, re.M)
    assert re.search(r"^plan: +To keep 90% of the ceiling", text, re.M)
    # the SLO's answer colocated, and split into prefill and decode pools, each in GPUs
    with duckdb.connect(str(wh), read_only=True) as con:
        ((split, fewer),) = con.execute(
            "SELECT gpus, gpus_fewer_than_colocated FROM latest_plan_slo_disagg"
        ).fetchall()
    assert re.search(rf"^split: +{split} × H200 as \d+ prefill \+ \d+ decode", text, re.M)
    assert f"{abs(fewer)} GPUs fewer" in text
    saves = re.search(r"^saves: +([\d,.]+) prefill GPU-s \(\$([\d,.]+)\) an hour", text, re.M)
    assert saves, text
    with duckdb.connect(str(wh), read_only=True) as con:
        gpus, per_hour, usd, price = con.execute(
            "SELECT gpus, gpu_seconds_saved_per_hour, usd_saved_per_hour, gpu_hour "
            "FROM latest_savings WHERE tenant = '*'"
        ).fetchone()
    # every GPU of the deployment counted, and dollars are those GPU-hours at one GPU's price
    assert gpus == 8 and saves.group(1) == f"{per_hour:,.1f}"
    assert saves.group(2) == f"{usd:,.2f}" and usd == pytest.approx(per_hour / 3600 * price)
    # the savings priced on that deployment, its whole pool (the line may wrap anywhere)
    words = f"lru shared at {at}, the whole KV pool of h200x8 serving deepseek-v3".split()
    assert re.search(r"\s+".join(map(re.escape, words)), text), text
    assert f"page:      {page.resolve()}" in lines and f"duckdb {wh} " in lines[-1]
    # the page and the warehouse hold the rest: every tenant, both isolations
    with duckdb.connect(str(wh), read_only=True) as con:
        found = con.execute(
            "SELECT list(DISTINCT tenant ORDER BY tenant), list(DISTINCT isolation ORDER BY "
            "isolation) FROM latest_hit_rates"
        ).fetchone()
    assert found == (["*", "agent", "chat", "claude-code", "kimi", "search"], ["salted", "shared"])
    assert 'id="history"' in page.read_text()
    assert 'id="slo-disagg"' in page.read_text()  # the split answer under the SLO table


def test_two_scheduled_runs_publish_their_summary_and_add_to_the_trend(
    prefect_server, tmp_path: Path
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from prefixscope.pipelines.fleet_report import SUMMARY_ARTIFACT, FlowParameters, fleet_report

    logs = tmp_path / "logs"
    wh, page = tmp_path / "wh.duckdb", tmp_path / "report.html"
    states = []
    for hour in (0, 1):  # a new hour of logs lands between the runs
        write_hour(logs, hour)
        states.append(
            fleet_report(
                FlowParameters(
                    inputs=(str(logs / "*.jsonl"),),
                    warehouse_path=str(wh),
                    report_path=str(page),
                    format_name="bailian",
                    tenant_from="type",
                    capacities_blocks=(32, 128, 512),
                    fleet_replicas=(2,),
                ),
                return_state=True,
            )
        )
    assert all(s.is_completed() for s in states)
    answer = states[1].result().summary
    assert len(answer.splitlines()) <= MAX_LINES and "ceiling:" in answer

    async def published() -> list:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[SUMMARY_ARTIFACT]))
            )

    artifacts = {a.flow_run_id: a for a in anyio.run(published)}
    runs = [s.state_details.flow_run_id for s in states]
    assert set(runs) <= set(artifacts)
    assert all(artifacts[r].type == "markdown" for r in runs)
    markdown = artifacts[runs[1]].data
    assert "## prefixscope fleet report" in markdown and "**ceiling**" in markdown

    with duckdb.connect(str(wh), read_only=True) as con:
        per_tenant = con.execute(
            "SELECT tenant, count(*), list(policy || ' ' || capacity_blocks) FROM run_history "
            "GROUP BY tenant ORDER BY tenant"
        ).fetchall()
    # the priced configuration: lru at the KV pool of h200x8 (deepseek-v3) in bailian's blocks
    pool = memory_split(resolve_model("deepseek-v3"), parse_deployment("h200x8"), block_size=16)
    assert per_tenant == [(t, 2, [f"lru {pool.kv_pool_blocks}"] * 2) for t in ("*", *TENANTS)]
    trend = next(d for d, layout in figures(page.read_text()) if "across runs" in str(layout))
    fleet = next(t for t in trend if t["name"] == "fleet")
    assert len(fleet["x"]) == 2

"""The ``fleet`` command and stage on real warehouses: its rows, one replica against
``simulate``, per-tenant rows that add up, capacities in GiB, and where step costs come from."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.budget import PARTS
from prefixscope.analysis.fleet.grid import engine_for
from prefixscope.analysis.fleet.hardware import of_deployment
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.cli import main
from prefixscope.stages import fleet
from tests.conftest import LLAMA_8B_CONFIG, mooncake_line


def rows(wh: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_one_replica_through_the_command_equals_simulate(bundled_warehouse, tmp_path, capsys):
    wh = str(bundled_warehouse.copy_to(tmp_path))
    assert main(["simulate", "--warehouse", wh, "--policy", "lru", "--capacity-blocks", "4000",
                 "--window", "all,steady"]) == 0  # fmt: skip
    assert main(["fleet", "--warehouse", wh, "--replicas", "1,3", "--router",
                 "round-robin,kv-aware", "--capacity-blocks", "4000", "--window",
                 "all,steady"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "kv-aware" in printed and "round-robin" in printed
    single = dict(rows(wh, "SELECT tenant, hit_tokens FROM hit_rates WHERE measure_window='all'"))
    for router in ("round-robin", "kv-aware"):
        fleet_rows = rows(
            wh,
            "SELECT tenant, hit_tokens FROM fleet_hit_rates WHERE replicas = 1 "
            f"AND measure_window = 'all' AND router = '{router}'",
        )
        assert dict(fleet_rows) == single
    # 2 routers x 2 replica counts x 2 windows x (fleet + 1 tenant)
    assert rows(wh, "SELECT count(*) FROM fleet_hit_rates") == [(16,)]
    assert rows(wh, "SELECT count(*) FROM fleet_replicas") == [(2 * (1 + 3),)]
    # every request served once, by exactly one replica
    served = rows(
        wh,
        "SELECT router, replicas, sum(requests) FROM fleet_replicas GROUP BY ALL ORDER BY ALL",
    )
    assert {r[2] for r in served} == {bundled_warehouse.result.accepted}
    # the view holds the newest row of every configuration, ready for the page
    assert rows(wh, "SELECT count(*) FROM latest_fleet_hit_rates") == [(16,)]
    # the miss budget: every part of every (configuration, window, tenant), adding up
    assert "where the prompt tokens went" in printed
    assert rows(wh, "SELECT count(*) FROM latest_miss_budget") == [(16 * len(PARTS),)]
    sums = rows(
        wh,
        "SELECT sum(tokens) = any_value(input_tokens), round(sum(share), 9) FROM miss_budget "
        "GROUP BY router, replicas, measure_window, tenant",
    )
    assert sums == [(True, 1.0)] * 16
    never = rows(
        wh,
        "SELECT b.share, 1 - h.ceiling_token_hit_rate FROM latest_miss_budget b "
        "JOIN latest_fleet_hit_rates h USING (tenant, router, replicas, measure_window) "
        "WHERE b.part = 'never_seen'",
    )
    assert len(never) == 16 and all(abs(a - b) < 1e-12 for a, b in never)
    # a hit part's GPU-seconds are what the fleet's rows say that tier saved
    saved = rows(
        wh,
        "SELECT b.gpu_seconds, h.gpu_seconds_saved_hbm FROM latest_miss_budget b "
        "JOIN latest_fleet_hit_rates h USING (tenant, router, replicas, measure_window) "
        "WHERE b.part = 'hit_hbm'",
    )
    assert len(saved) == 16 and all(abs(a - b) <= 1e-9 * max(b, 1) for a, b in saved)


@pytest.fixture
def two_tenants(tmp_path, write_lines) -> Path:
    """Two tenants whose conversations share a system block and grow turn by turn."""
    wh = tmp_path / "wh.duckdb"
    for tenant, offset in (("alpha", 0), ("beta", 10_000)):
        lines = []
        for s in range(40):
            chain = [1]  # the shared system block
            for turn in range(4):
                chain = chain + [offset + s * 100 + turn * 10 + k for k in range(3)]
                t = s * 7 + turn * 60
                lines.append(mooncake_line(t * 1000, len(chain) * 512, 20, chain))
        path = write_lines(lines)
        assert main(["ingest", "--format", "mooncake", "--input", str(path), "--tenant",
                     tenant, "--warehouse", str(wh)]) == 0  # fmt: skip
    return wh


def test_tenant_rows_add_up_to_the_fleet_row(two_tenants: Path) -> None:
    result = fleet.simulate_fleets(
        two_tenants,
        fleet.FleetSettings(routers=tuple(ROUTERS), replicas=(3,), windows=("all",)),
    )
    table = result.hit_rates.to_pylist()
    assert {r["tenant"] for r in table} == {"*", "alpha", "beta"}
    for router in ROUTERS:
        mine = [r for r in table if r["router"] == router]
        whole = next(r for r in mine if r["tenant"] == "*")
        parts = [r for r in mine if r["tenant"] != "*"]
        for column in ("requests", "input_tokens", "hit_tokens"):
            assert whole[column] == sum(r[column] for r in parts)
        assert whole["hit_tokens"] > 0
        assert whole["token_hit_rate"] <= whole["ceiling_token_hit_rate"]
        assert whole["ttft_p50_s"] <= whole["ttft_p95_s"] <= whole["ttft_p99_s"]
        assert whole["load_imbalance"] >= 1.0
        assert (whole["model"], whole["gpu"], whole["cost_model"]) == ("llama-3-8b", "h100",
                                                                       "measured")  # fmt: skip


def test_capacity_in_gib_is_blocks_of_the_model(two_tenants: Path) -> None:
    settings = fleet.FleetSettings(
        replicas=(2,),
        capacities=Capacities(gib=[0.5]),
        model="llama-3-8b",
    )
    result = fleet.simulate_fleets(two_tenants, settings)
    expected = resolve_model("llama-3-8b").blocks_in(0.5, 512)
    assert set(result.hit_rates.column("capacity_blocks").to_pylist()) == {expected}
    assert set(result.hit_rates.column("capacity_gib").to_pylist()) == {0.5}


def test_a_model_config_is_read_once_per_run(two_tenants: Path, tmp_path, monkeypatch) -> None:
    """The settings resolve the model once: every deployment, capacity and price of one run
    is the shape read then, even when the file changes meanwhile (here: after the first read,
    a config of twice the KV heads, which would halve every pool)."""
    from prefixscope.analysis.cost.models import ModelShape

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA_8B_CONFIG))
    real, reads = ModelShape.from_hf_config.__func__, []

    def read_then_change(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
        reads.append(args)
        shape = real(cls, *args, **kwargs)
        config.write_text(json.dumps({**LLAMA_8B_CONFIG, "num_key_value_heads": 16}))
        return shape

    monkeypatch.setattr(ModelShape, "from_hf_config", classmethod(read_then_change))
    settings = fleet.FleetSettings(
        replicas=(2, 3),
        routers=("round-robin", "kv-aware"),
        deployments=("h100x1", "h200x1"),
        capacities=Capacities(),  # each deployment's own KV pool
        model="mine",
        model_config=str(config),
        windows=("all",),
    )
    result = fleet.simulate_fleets(two_tenants, settings)
    assert len(reads) == 1
    pools = {r["deployment"]: r["capacity_blocks"] for r in result.hit_rates.to_pylist()}
    eight = resolve_model("llama-3-8b")
    for deployment in ("h100x1", "h200x1"):  # the shape first read, llama-3-8b's own
        assert pools[deployment] == of_deployment(deployment, eight, 512, "bf16").kv_pool_blocks


@pytest.mark.parametrize(
    ("kind", "gpu", "fitted", "source"),
    [
        ("auto", "h100", None, "measured"),
        ("auto", "mi300x", None, "roofline"),  # no measured kernels
        ("auto", "h100", ("run-1", (1e-3, 1e-6, 0.0, 1e-11, 1e-12), (64.0, 16.0)), "calibrated"),
        ("measured", "h100", ("run-1", (1e-3, 1e-6, 0.0, 1e-11, 1e-12), (64.0, 16.0)), "measured"),
        ("roofline", "h100", None, "roofline"),
    ],
)
def test_steps_are_priced_by_the_calibrated_model_when_there_is_one(kind, gpu, fitted, source):
    engine, pricing = engine_for(fleet.FleetSettings(cost_model=kind, gpu=gpu), fitted)
    assert engine.cost.source == pricing.cost_model == source
    if source == "calibrated":
        assert engine.cost.a == 1e-3 and pricing.cost_model_run_id == "run-1"
    else:  # only a calibration has a run that fitted it
        assert pricing.cost_model_run_id is None


def test_calibrated_without_a_model_in_the_warehouse_says_run_replay() -> None:
    with pytest.raises(ValueError, match="run replay"):
        engine_for(fleet.FleetSettings(cost_model="calibrated"), None)


def test_each_router_delay_is_a_configuration_of_its_own(two_tenants: Path, capsys) -> None:
    wh = str(two_tenants)
    assert main(["fleet", "--warehouse", wh, "--router", "kv-aware,round-robin", "--replicas",
                 "3", "--capacity-blocks", "60", "--router-delay", "0,3600000",
                 "--window", "all"]) == 0  # fmt: skip
    assert "kv-aware@3.6e+06ms" in capsys.readouterr().out
    hit = dict(rows(wh, "SELECT router || '/' || router_delay_ms, token_hit_rate FROM "
                        "latest_fleet_hit_rates WHERE tenant = '*'"))  # fmt: skip
    assert set(hit) == {"kv-aware/0.0", "kv-aware/3600000.0", "round-robin/0.0"}
    assert hit["kv-aware/3600000.0"] < hit["kv-aware/0.0"]
    stale = dict(
        rows(wh, "SELECT router_delay_ms, share FROM latest_miss_budget WHERE tenant = '*' "
                 "AND router = 'kv-aware' AND part = 'stale_router_view'")
    )  # fmt: skip
    assert stale[0.0] == 0 and stale[3600000.0] > 0
    assert rows(wh, "SELECT count(DISTINCT router_delay_ms) FROM latest_fleet_replicas "
                    "WHERE router = 'kv-aware'") == [(2,)]  # fmt: skip

"""``fleet --deployment``: each replica a deployment whose KV pool is its capacity, the memory
split on every row, what-if capacities judged against the HBM, and bad input refused in one
line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from prefixscope.analysis.cost import gpus as gpu_specs
from prefixscope.analysis.cost.deployment import memory_split, parse_deployment
from prefixscope.analysis.cost.gpus import GPUS
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.fleet.settings import FleetSettings
from prefixscope.analysis.fleet.tierspec import TierSpec
from prefixscope.analysis.plan.fleets import configuration_rows
from prefixscope.analysis.plan.plan import Sizing
from prefixscope.analysis.plan.slo_settings import PlanSloSettings
from prefixscope.analysis.simulation.capacities import Capacities
from prefixscope.cli import main
from prefixscope.dashboards.plan import sentences
from prefixscope.stages.fleet import simulate_fleets
from prefixscope.stages.plan_slo import plan_for_slo
from tests.conftest import LLAMA_8B_CONFIG, mooncake_line

#: What ``--model-config`` reads: a Llama-3-8B-like config.json under another name.
CONFIG = LLAMA_8B_CONFIG


def rows(wh: Path, sql: str, params: list | None = None) -> list[tuple]:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


@pytest.fixture
def small(tmp_path: Path, write_lines) -> Path:  # noqa: ANN001
    """Forty short conversations of 512-token blocks, one tenant."""
    lines = []
    for s in range(40):
        chain = [1]
        for turn in range(3):
            chain = chain + [s * 100 + turn * 10 + k for k in range(3)]
            lines.append(mooncake_line((s * 7 + turn * 60) * 1000, len(chain) * 512, 20, chain))
    wh = tmp_path / "wh.duckdb"
    assert main(["ingest", "--format", "mooncake", "--input", str(write_lines(lines)),
                 "--warehouse", str(wh)]) == 0  # fmt: skip
    return wh


def fleet(wh: Path, *extra: str) -> int:
    return main(["fleet", "--warehouse", str(wh), "--replicas", "2", "--router", "round-robin",
                 "--window", "all", *extra])  # fmt: skip


COLUMNS = "deployment, gpus, kv_pool_blocks, weights_gib, reserve_gib, kv_pool_gib, exceeds_hbm"


def test_each_deployment_runs_at_its_own_pool_with_its_split(small: Path) -> None:
    deployments = ["h100x1", "h200x1", "h100x2"]
    assert fleet(small, "--deployment", ",".join(deployments)) == 0
    shape = resolve_model("llama-3-8b")
    (block_size,) = {r[0] for r in rows(small, "SELECT block_size FROM fleet_hit_rates")}
    for name in deployments:
        split = memory_split(shape, parse_deployment(name), block_size=block_size)
        found = rows(
            small,
            f"SELECT DISTINCT capacity_blocks, gpu, {COLUMNS} FROM fleet_hit_rates "
            "WHERE deployment = ?",
            [name],
        )
        assert found == [(split.kv_pool_blocks, split.deployment[:4], name, split.gpus,
                          split.kv_pool_blocks, pytest.approx(split.weights_gib),
                          pytest.approx(split.reserve_gib), pytest.approx(split.kv_pool_gib),
                          False)]  # fmt: skip
        # per GPU the split is the budget
        w, r, k = found[0][5:8]
        assert w + r + k == pytest.approx(float(GPUS[split.deployment[:4]].hbm_gib) * 0.9)
    # each replica's rows carry its deployment too
    per_replica = rows(small, "SELECT deployment, count(*) FROM fleet_replicas GROUP BY ALL")
    assert dict(per_replica) == {name: 2 for name in deployments}
    # two H100s hold more KV than one (TP shards the heads)
    pools = dict(rows(small, "SELECT DISTINCT deployment, kv_pool_blocks FROM fleet_hit_rates"))
    assert pools["h100x2"] > 2 * pools["h100x1"]


@pytest.mark.parametrize(
    ("flags", "exceeds"),
    [
        # a what-if with a deployment: judged against its pool
        (["--deployment", "h100", "--capacity-blocks", "1,1000000"], {1: False, 1_000_000: True}),
        # no deployment: judged against one --gpu serving --model; columns NULL
        (["--capacity-blocks", "1,1000000"], {1: False, 1_000_000: True}),
        (["--capacity-blocks", "1,1000000", "--gpu", "h200"], {1: False, 1_000_000: True}),
        # a GPU without an HBM figure cannot judge
        (["--capacity-blocks", "1,1000000", "--gpu", "mygpu:400:1.6"], {1: None, 1_000_000: None}),
        # weights that leave one GPU no room: nothing fits
        (["--capacity-blocks", "1", "--model", "llama-3.1-70b"], {1: True}),
    ],
)
def test_a_capacity_is_judged_against_the_hbm(
    small: Path, capsys, flags: list[str], exceeds
) -> None:  # noqa: ANN001
    assert fleet(small, *flags) == 0
    found = rows(small, "SELECT DISTINCT capacity_blocks, deployment, exceeds_hbm FROM "
                        "fleet_hit_rates")  # fmt: skip
    assert {c: e for c, _, e in found} == exceeds
    with_deployment = "--deployment" in flags
    assert all((d is not None) == with_deployment for _, d, _ in found)
    # the printed table says the same, beside each row's deployment
    table, budget = capsys.readouterr().out.split("where the prompt tokens went")
    head, *lines = table.splitlines()
    assert head.split()[:5] == ["window", "replicas", "deployment", "capacity", "HBM"]
    assert len(budget.splitlines()) == 1 + len(exceeds)  # its header, a line a configuration
    word = {False: "ok", True: "over", None: "—"}
    printed = {int(x[3].replace(",", "")): (x[2], x[5]) for x in map(str.split, lines)}
    assert printed == {
        c: ("h100x1" if with_deployment else "—", word[e]) for c, e in exceeds.items()
    }


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--deployment", "h100x3"], "does not divide"),
        (["--deployment", "nogpu"], "unknown GPU"),
        (["--deployment", "h100", "--model", "llama-3.1-70b"], "does not fit on h100x1"),
        (["--deployment", "h100,h100x1"], "given twice"),
        (["--deployment", "h100", "--model", "nope"], "unknown model"),
        ([], "no capacity to simulate"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(small: Path, capsys, flags, says) -> None:  # noqa: ANN001
    before = rows(small, "SELECT count(*) FROM runs")
    assert fleet(small, *flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and " — " in err, err
    assert err.startswith("prefixscope fleet: error:")
    assert rows(small, "SELECT count(*) FROM runs") == before
    assert rows(small, "SELECT count(*) FROM fleet_hit_rates") == [(0,)]


def test_a_model_config_sizes_the_pool_and_names_the_rows(small: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    assert fleet(small, "--deployment", "h100", "--model-config", str(config)) == 0
    shape = resolve_model(None, str(config))
    split = memory_split(shape, parse_deployment("h100"), block_size=512)
    assert rows(small, "SELECT DISTINCT model, kv_pool_blocks FROM fleet_hit_rates") == [
        (shape.name, split.kv_pool_blocks)
    ]


def fleet_row(**over) -> dict:  # noqa: ANN003
    """One stored fleet row as the planner reads it: defaults, then ``over``."""
    row = {
        "tenant": "*", "measure_window": "all", "load_scale": 1.0, "router": "cache-aware",
        "replicas": 4, "capacity_blocks": 800, "capacity_tokens": 800 * 512, "policy": "lru",
        "dram_blocks": 0, "store_blocks": None, "store_unbounded": None, "ttft_p95_s": 1.0,
        "token_hit_rate": 0.5, "ceiling_token_hit_rate": 0.5, "run_id": "r", "gpu": "h100",
        "deployment": None, "exceeds_hbm": None, "filled": True,
    }  # fmt: skip
    return {**row, **over}


SIZING = Sizing("llama-3-8b", "h100", "roofline", 131072.0 * 512, lambda n, c: n)

PLANS = [
    # (fleet rows, prices, the chosen row's index or None, its cost)
    # a fleet that cannot exist is never the answer, however cheap
    (
        [
            fleet_row(replicas=1, exceeds_hbm=True),
            fleet_row(deployment="h100x1", exceeds_hbm=False),
        ],
        Prices(),
        1,
        4 * GPUS["h100"].price_hour,
    ),
    # priced in GPUs: replicas × GPUs each × the deployment's GPU's catalog price
    (
        [
            fleet_row(deployment="h200x8", gpu="h200", replicas=2, exceeds_hbm=False),
            fleet_row(deployment="h100x1", replicas=8, exceeds_hbm=False),
        ],
        Prices(),
        1,
        8 * GPUS["h100"].price_hour,
    ),
    (
        [fleet_row(deployment="h200x8", gpu="h200", replicas=1, exceeds_hbm=False)],
        Prices(),
        0,
        8 * GPUS["h200"].price_hour,
    ),
    # --prices gpu_hour prices every GPU alike
    (
        [fleet_row(deployment="h200x8", gpu="h200", replicas=1, exceeds_hbm=False)],
        Prices(gpu_hour=1.0),
        0,
        8.0,
    ),
    # no deployment: one GPU of the kind that priced the steps
    ([fleet_row(gpu="a100", exceeds_hbm=False)], Prices(), 0, 4 * GPUS["a100"].price_hour),
    # every row exceeds its HBM: no answer
    ([fleet_row(exceeds_hbm=True)], Prices(), None, None),
]


@pytest.mark.parametrize(("fleet_rows", "prices", "chosen", "cost"), PLANS)
def test_the_planner_prices_gpus_and_never_a_fleet_that_cannot_exist(
    fleet_rows,
    prices,
    chosen,
    cost,  # noqa: ANN001
) -> None:
    (row,) = configuration_rows(fleet_rows, "all", 0.9, prices, SIZING, 1_000)
    if chosen is None:
        assert row["reached"] is False and row["replicas"] is None and row["cost_per_hour"] is None
        assert "HBM" in row["note"] and "--deployment" in row["note"]
        assert "No simulated fleet reaches the target" in " ".join(sentences([row]))
        return
    want = fleet_rows[chosen]
    assert row["reached"] and row["cost_per_hour"] == pytest.approx(cost)
    assert (row["replicas"], row["deployment"]) == (want["replicas"], want["deployment"])
    text = " ".join(sentences([row]))
    gpus = row["gpus"]
    n = want["replicas"]
    label = row["fleet_gpu"].upper() + (f"x{gpus} ({n * gpus} GPUs;" if gpus > 1 else " (")
    assert f"{n} × {label}" in text and "llama-3-8b, " in text, text
    assert f"${cost:,.2f} an hour" in text


def test_a_target_no_fleet_meets_is_said_in_words() -> None:
    rows = [fleet_row(token_hit_rate=0.1, exceeds_hbm=False)]
    (row,) = configuration_rows(rows, "all", 0.9, Prices(), SIZING, 1_000)
    assert row["reached"] is False
    text = " ".join(sentences([row]))
    assert text.startswith("No simulated fleet reaches the target: the closest")
    assert "0.1000" in text


@pytest.mark.parametrize(
    "command", ["fleet", "plan", "savings", "replay", "roofline", "deployment"]
)
def test_every_command_that_takes_a_model_takes_a_config(command, tmp_path, capsys) -> None:  # noqa: ANN001
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**CONFIG, "num_hidden_layers": 0}))
    assert main([command, "--warehouse", str(tmp_path / "wh.duckdb"), "--model-config",
                 str(bad)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    # the file was read and refused by its key: the flag is known
    assert "num_hidden_layers" in err and "unrecognized" not in err, err
    assert not (tmp_path / "wh.duckdb").exists()


def test_plan_reads_a_model_config(small: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    assert main(["simulate", "--warehouse", str(small), "--policy", "ceiling,lru",
                 "--capacity-blocks", "10,100", "--window", "all"]) == 0  # fmt: skip
    assert main(["plan", "--warehouse", str(small), "--model-config", str(config),
                 "--target", "0.5"]) == 0  # fmt: skip
    shape = resolve_model(None, str(config))
    assert rows(small, "SELECT DISTINCT model FROM plan") == [(shape.name,)]
    assert shape.name != "llama-3-8b" and shape.name in capsys.readouterr().out


def test_a_tp_deployment_prices_its_steps_on_its_gpus(small: Path) -> None:
    """The fleet's step cost of ``GPUxTP`` is the roofline of one GPU of TP (FLOPs and bytes
    over TP, the all-reduces added); at one what-if capacity two H100s serve faster than one."""
    from prefixscope.analysis.fleet.grid import engine_for
    from prefixscope.analysis.fleet.settings import FleetSettings
    from prefixscope.analysis.fleet.stepcost import from_roofline

    shape = resolve_model("llama-3.3-70b")
    settings = FleetSettings(model="llama-3.3-70b", gpu="h100", cost_model="roofline")
    for tp in (1, 2, 4):
        engine, pricing = engine_for(settings, None, tp)
        assert engine.cost == from_roofline(shape, GPUS["h100"], tp=tp)
        assert (pricing.gpu, pricing.cost_model) == ("h100", "roofline")
    # TP 4 halves no term exactly (the all-reduces and the replicated head), but every term falls
    one, four = (engine_for(settings, None, tp)[0].cost for tp in (1, 4))
    assert four.b < one.b / 2 and four.e < one.e / 2 and four.a < one.a
    # in the stage: the same capacity, one GPU against two
    assert fleet(small, "--deployment", "h100x1,h100x2", "--capacity-blocks", "8",
                 "--replicas", "1", "--cost-model", "roofline") == 0  # fmt: skip
    ttft = dict(rows(small, "SELECT deployment, ttft_p50_s FROM fleet_hit_rates "
                            "WHERE tenant = '*'"))  # fmt: skip
    assert ttft["h100x2"] < ttft["h100x1"]


def test_a_calibrated_cost_model_is_not_stretched_over_tp(small: Path, capsys) -> None:  # noqa: ANN001
    assert fleet(small, "--deployment", "h100x2", "--cost-model", "calibrated") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "times one GPU, not h100x2's 2" in err, err
    assert rows(small, "SELECT count(*) FROM runs") == [(1,)]  # the ingest's alone


def gpu_file(tmp_path: Path, **extra: float) -> Path:
    """A GPU of our own: an H20-like part, with ``extra`` keys of the GPU file."""
    path = tmp_path / "h20.toml"
    keys = {"tflops": 148, "tbps": 4.0, "hbm_gib": 96, **extra}
    path.write_text('name = "h20"\n' + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return path


def test_a_deployments_dram_tier_runs_on_its_own_hosts_link(small: Path, tmp_path: Path) -> None:
    """A DRAM tier without its own bandwidth runs at its deployment's host link, from the
    catalog or the GPU file, whatever ``--gpu`` (default h100) says: PCIe 4.0 for L40S and
    A100, 5.0 for H100."""
    mine = gpu_file(tmp_path, host_link_gbps=20)
    deployments = ["l40sx1", "a100x1", "h100x1", f"{mine}x1"]
    assert fleet(small, "--deployment", ",".join(deployments), "--tier", "dram:4") == 0
    found = dict(rows(small, "SELECT DISTINCT deployment, dram_gbps FROM fleet_hit_rates"))
    assert found == {"l40sx1": 31.5, "a100x1": 31.5, "h100x1": 63.0, "h20x1": 20.0}


def test_the_planner_and_the_fleet_give_a_gpu_file_without_a_link_one_dram_link(
    small: Path, tmp_path: Path
) -> None:
    """A GPU file with host DRAM and no host link: the SLO planner's DRAM tier reads at the
    link a fleet's DRAM tier gets (``dram_gbps_for``), not at a link of its own."""
    from prefixscope.analysis.fleet.run import DRAM_GBPS
    from prefixscope.analysis.fleet.stepcost import from_roofline
    from prefixscope.analysis.plan.space import replica_of, tiers_for

    path = gpu_file(tmp_path, host_dram_gib=256)
    shape = resolve_model("llama-3-8b")
    replica = replica_of(f"{path}x1", shape, 512, "bf16", from_roofline(shape, GPUS["h100"]))
    assert tiers_for(replica, 64.0, None, 512).dram_gbps == DRAM_GBPS
    assert fleet(small, "--deployment", f"{path}x1", "--tier", "dram:4") == 0
    found = rows(small, "SELECT DISTINCT dram_gbps FROM fleet_hit_rates")
    assert found == [(DRAM_GBPS,)]


def test_a_gpu_files_price_is_what_the_planner_charges(tmp_path: Path) -> None:
    from prefixscope.analysis.fleet.stepcost import from_roofline
    from prefixscope.analysis.plan.space import replica_of, series_of

    path = gpu_file(tmp_path, price_hour=1.8)
    shape = resolve_model("llama-3-8b")
    replica = replica_of(f"{path}x8", shape, 512, "bf16", from_roofline(shape, GPUS["h100"]))
    (series,) = series_of([replica], ("round-robin",), Prices(), 512, tiered=False)
    assert series.usd_per_replica_hour == pytest.approx(8 * 1.8)
    assert Prices().gpu_price(parse_deployment(f"{path}x8").gpu) == 1.8
    assert Prices(gpu_hour=4.0).gpu_price(parse_deployment(f"{path}x8").gpu) == 4.0
    # a GPU the catalog knows, by name, and one known by nothing but its name
    assert Prices().gpu_price("h200") == GPUS["h200"].price_hour
    assert Prices().gpu_price("h20") == 2.5


def test_the_slo_planner_runs_and_prices_a_gpu_file(small: Path, tmp_path: Path) -> None:
    """``plan --slo --deployments h20.tomlx1``: the GPU of a file is looked up as that file's
    spec (not its name, which the catalog does not know), and each GPU-hour is its price."""
    path = gpu_file(tmp_path, price_hour=1.8, host_dram_gib=256, host_link_gbps=63)
    argv = ["plan", "--warehouse", str(small), "--deployments", f"{path}x1",
            "--model", "llama-3-8b", "--slo", "ttft-p95=5"]  # fmt: skip
    assert main(argv) == 0
    found = rows(
        small,
        "SELECT replicas, gpus, dram_gib_per_replica, store_gib, usd_per_hour "
        "FROM latest_plan_slo_answers WHERE prefix_caching AND met",
    )
    assert found
    spec = parse_deployment(f"{path}x1").gpu
    for replicas, gpus, dram, store, usd in found:
        gb = 2**30 / 1e9
        want = Prices().per_hour(replicas, (dram or 0) * gb, (store or 0) * gb, 1, spec)
        assert gpus == replicas and usd == pytest.approx(want, rel=1e-9)
        assert usd >= gpus * 1.8  # the GPU-hours at the file's price, not the default 2.50


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["roofline", "--cached", "1000", "--new", "100"], "mine:"),
        (["roofline", "--cached", "1000", "--new", "100", "--model", "my-8b"], "my-8b:"),
        (["deployment", "--deployment", "h100x1"], "h100x1      mine "),
    ],
)
def test_a_model_config_is_named_by_its_file_not_the_default_model(
    tmp_path: Path,
    capsys,
    argv: list[str],
    named: str,  # noqa: ANN001
) -> None:
    config = tmp_path / "mine.json"
    config.write_text(json.dumps(CONFIG))
    assert main([*argv, "--model-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert named in out and "llama-3-8b" not in out


def test_a_plan_at_a_load_no_fleet_ran_at_names_the_loads_there_are(small: Path, capsys) -> None:  # noqa: ANN001
    """Fleets simulated at 1× only: ``plan --load-scale 2`` says so in one line (not that no
    fleet was simulated), and writes no plan."""
    assert main(["simulate", "--warehouse", str(small), "--policy", "ceiling,lru",
                 "--capacity-blocks", "20,200"]) == 0  # fmt: skip
    assert fleet(small, "--capacity-blocks", "200") == 0
    capsys.readouterr()
    assert main(["plan", "--warehouse", str(small), "--load-scale", "2"]) == 2
    err = capsys.readouterr().err
    assert "no fleet was simulated at --load-scale 2 (the fleet runs are at 1)" in err
    assert len(err.strip().splitlines()) == 1
    assert rows(small, "SELECT count(*) FROM plan") == [(0,)]
    assert main(["plan", "--warehouse", str(small)]) == 0  # at 1× it plans


def test_a_plan_after_fleets_on_a_gpu_file_prices_them_when_given_the_file(
    small: Path, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    """Fleet rows store a file's GPU by its name (``h20x1``), which the catalog does not know:
    ``plan`` without the file says, in one line, to give it; with ``--gpu FILE.toml`` it
    prices them at the file's price; beside a catalog fleet it prices that one and notes the
    rest."""
    path = gpu_file(tmp_path, price_hour=1.5)
    assert fleet(small, "--deployment", f"{path}x1") == 0
    assert main(["simulate", "--warehouse", str(small), "--policy", "ceiling,lru",
                 "--capacity-blocks", "4,8", "--window", "all"]) == 0  # fmt: skip
    plan = ["plan", "--warehouse", str(small)]
    capsys.readouterr()
    assert main(plan) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give plan --gpu FILE.toml" in err, err
    assert main([*plan, "--gpu", str(path)]) == 0
    sql = (
        "SELECT fleet_gpu, gpu_hour, note FROM latest_plan "
        "WHERE kind = 'configuration' AND tenant = '*'"
    )
    assert [r[:2] for r in rows(small, sql)] == [("h20", 1.5)]
    assert fleet(small, "--deployment", "h100x1") == 0
    assert main(plan) == 0
    (found,) = rows(small, sql)
    assert found[0] == "h100" and "fleets on h20x1 not priced" in found[2]


@pytest.fixture
def counted_gpu_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A GPU file with its own host link and price, and every GPU file read from now on."""
    path = tmp_path / "g.toml"
    path.write_text('name = "mygpu"\ntflops = 400\ntbps = 2.0\nhbm_gib = 80\n'
                    'host_link_gbps = 32\nprice_hour = 3.5\n')  # fmt: skip
    reads: list[str] = []
    read = gpu_specs.read_gpu_file

    def counted(p: str):  # type: ignore[no-untyped-def]
        reads.append(str(p))
        return read(p)

    monkeypatch.setattr(gpu_specs, "read_gpu_file", counted)
    return path, reads


@pytest.mark.parametrize("where", ["--gpu", "--deployment"])
def test_a_fleet_run_reads_each_gpu_file_once(
    small: Path, counted_gpu_file: tuple[Path, list[str]], where: str
) -> None:
    """A GPU file, as ``--gpu`` or a deployment's GPU, is resolved once per run, with its
    settings: the check, the capacity judged, the DRAM tier's host link and the step cost all
    take the spec it gave, and the rows name it."""
    path, reads = counted_gpu_file
    settings = FleetSettings(
        routers=("round-robin",),
        replicas=(2,),
        capacities=Capacities(blocks=[] if where == "--deployment" else [40]),
        drams=(TierSpec(gib=4.0),),
        gpu=str(path) if where == "--gpu" else "h100",
        deployments=(f"{path}x1",) if where == "--deployment" else (),
        windows=("all",),
    )
    result = simulate_fleets(small, settings)
    assert reads == [str(path)]
    assert set(result.hit_rates.column("gpu").to_pylist()) == {"mygpu"}
    assert set(result.hit_rates.column("dram_gbps").to_pylist()) == {32.0}


@pytest.mark.parametrize("where", ["--gpu", "--deployment"])
def test_the_fleet_command_reads_each_gpu_file_once(
    small: Path, counted_gpu_file: tuple[Path, list[str]], where: str
) -> None:
    """From the command line too: the flag resolves the file, and the settings take the
    spec or the deployment it gave; nothing below reads the file again."""
    path, reads = counted_gpu_file
    given = ["--gpu", str(path), "--capacity-blocks", "40"] if where == "--gpu" else [
        "--deployment", f"{path}x1"]  # fmt: skip
    assert main(["fleet", "--warehouse", str(small), "--replicas", "2", "--router",
                 "round-robin", "--tier", "dram:4", *given]) == 0  # fmt: skip
    assert reads == [str(path)]
    with duckdb.connect(str(small), read_only=True) as con:
        rows = con.execute("SELECT DISTINCT gpu, dram_gbps FROM fleet_hit_rates").fetchall()
    assert rows == [("mygpu", 32.0)]


@pytest.mark.parametrize("where", ["--gpu", "--deployment"])
def test_roofline_reads_its_gpu_file_once(
    counted_gpu_file: tuple[Path, list[str]], where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, reads = counted_gpu_file
    given = str(path) if where == "--gpu" else f"{path}x2"
    assert main(["roofline", "--model", "llama-3-8b", "--cached", "1000", "--new", "100",
                 where, given]) == 0  # fmt: skip
    assert reads == [str(path)]
    out = capsys.readouterr().out
    assert "400 TFLOP/s, 2.00 TB/s" in out
    # its all-reduces at TP 2 take its host link: the file names no NVLink
    assert ("all-reduce over PCIe 32.0 GB/s" in out) == (where == "--deployment")


@pytest.mark.parametrize(
    "argv",
    [
        ["savings", "--gpu", "{path}", "--policy", "lru", "--capacity-blocks", "40"],
        ["savings", "--deployment", "{path}x1", "--policy", "lru", "--capacity-blocks", "40"],
        ["plan", "--gpu", "{path}"],
    ],
    ids=["savings --gpu", "savings --deployment", "plan --gpu"],
)
def test_savings_and_plan_read_their_gpu_file_once(
    small: Path, counted_gpu_file: tuple[Path, list[str]], argv: list[str]
) -> None:
    """The flag resolves the file; the settings resolve the deployment that fits, its check,
    its calibration looked up, its step cost and its price from that spec."""
    path, reads = counted_gpu_file
    assert main(["simulate", "--warehouse", str(small), "--policy", "ceiling,lru",
                 "--capacity-blocks", "40", "--outcomes"]) == 0  # fmt: skip
    reads.clear()
    given = [a.format(path=path) for a in argv]
    assert main([given[0], "--warehouse", str(small), *given[1:]]) == 0
    assert reads == [str(path)]
    if argv[0] == "savings":  # priced at the file's own price, $3.50 a GPU-hour
        with duckdb.connect(str(small), read_only=True) as con:
            found = con.execute("SELECT DISTINCT gpu, gpu_hour FROM savings").fetchall()
        assert found == [("mygpu", 3.5)]


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["savings", "--policy", "lru", "--capacity-blocks", "40"],
        ["fleet", "--replicas", "2", "--router", "round-robin", "--capacity-blocks", "40"],
    ],
    ids=["plan", "savings", "fleet"],
)
def test_a_prices_file_is_read_once_per_run(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """``--prices`` is read once, by the settings, whatever checks and prices from it."""
    from prefixscope.analysis.cost import prices

    assert main(["simulate", "--warehouse", str(small), "--policy", "ceiling,lru",
                 "--capacity-blocks", "40", "--outcomes"]) == 0  # fmt: skip
    path = tmp_path / "prices.toml"
    path.write_text("dram_gb_hour = 0.004\n")
    reads: list[str] = []
    read = prices.read_text

    def counted(p, *args):  # type: ignore[no-untyped-def]
        reads.append(str(p))
        return read(p, *args)

    monkeypatch.setattr(prices, "read_text", counted)
    assert main([argv[0], "--warehouse", str(small), "--prices", str(path), *argv[1:]]) == 0
    assert reads == [str(path)]


def test_the_flow_reads_its_gpu_file_once(counted_gpu_file: tuple[Path, list[str]]) -> None:
    """The flow's check resolves ``--savings-gpu`` and the deployment that fits once for the
    run; the fleet's and the plan's settings it builds take them and read nothing again."""
    from prefixscope.pipelines import parameters
    from prefixscope.pipelines.flow_parameters import FlowParameters
    from prefixscope.stages.plan import PlanSettings

    path, reads = counted_gpu_file
    checked = parameters.check(
        FlowParameters(inputs=(__file__,), savings_model="llama-3-8b", savings_gpu=str(path)),
        serving=True,
    )
    assert reads == [str(path)]
    assert checked.gpu is not None and checked.gpu.name == "mygpu"
    assert checked.deployment is not None and checked.deployment.name == "mygpux1"
    fleet_settings = parameters.fleet_settings(
        capacities_blocks=checked.capacities_blocks, windows=checked.windows,
        model="llama-3-8b", gpu=checked.gpu, replicas=checked.fleet_replicas,
        dask_address=None, deployment=checked.deployment,
    )  # fmt: skip
    fleet_settings.check()
    PlanSettings(model="llama-3-8b", gpu=checked.gpu).check()
    assert reads == [str(path)]
    assert fleet_settings.parsed_deployments == (checked.deployment,)


def test_an_slo_plan_reads_its_gpu_file_once(
    small: Path, counted_gpu_file: tuple[Path, list[str]]
) -> None:
    """``plan --slo --deployments FILE.tomlx1``: the file is parsed once with the settings, and
    the check, the calibration looked up, the replica and its price take what it gave."""
    path, reads = counted_gpu_file
    settings = PlanSloSettings(
        deployments=(f"{path}x1",), slo="ttft-p95=60", routers=("round-robin",)
    )
    result = plan_for_slo(small, settings)
    assert reads == [str(path)]
    assert set(result.fleets.column("gpu").to_pylist()) == {"mygpu"}

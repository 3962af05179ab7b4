"""``prefixscope metrics``: OpenMetrics text that Prometheus' parsers read back, with the views'
values, names by the conventions, escaped labels, and an atomic write."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as classic

from prefixscope.analysis.trace.load import load_trace
from prefixscope.cli import main
from prefixscope.export import atomic
from prefixscope.export.metrics import SOURCES, metrics_text
from prefixscope.synthetic_gateway import engine_reports

#: A tenant name with every character a label value escapes, and more.
ODD = 'we"ird\\ténant {x="1"}'


def gateway_line(i: int, cached: int = 0) -> str:
    """A gateway log line: three tenants, each re-sending a growing conversation over its own
    system prompt, with the engine's reported cached tokens."""
    tenant = ("acme", "globex", "initech")[i % 3]
    words = [f"{tenant}{k}" for k in range(40)] + [f"turn{k}" for k in range(i // 3 * 7)]
    return json.dumps({
        "timestamp": 1_790_000_000 + 5 * i, "user": tenant,
        "request": {"messages": [{"role": "user", "content": " ".join(words)}]},
        "response": {"id": f"r{i}", "usage": {"completion_tokens": 7,
                     "prompt_tokens_details": {"cached_tokens": cached}}},
    })  # fmt: skip


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gateway log with engine reports (three tenants) beside a Mooncake log of the odd
    tenant, through simulate, validate, savings and plan: every view the metrics read."""
    folder = tmp_path_factory.mktemp("metrics")
    log = folder / "g.jsonl"
    log.write_text("".join(gateway_line(i) + "\n" for i in range(105)))
    mooncake = folder / "m.jsonl"
    mooncake.write_text("".join(
        json.dumps({"timestamp": 1000 * i, "input_length": 40, "output_length": 5,
                    "hash_ids": [9_000_000, 9_000_001 + i % 2, 9_000_003 + i % 3]}) + "\n"
        for i in range(12)
    ))  # fmt: skip
    wh = str(folder / "wh.duckdb")
    # the reports of an LRU engine of 30 blocks (synthetic_gateway's plain-Python cache), over
    # the blocks a first ingest finds; the second ingest of the same path replaces the first
    assert main(["ingest", "--format", "openai", "--tenant-field", "user", "--input", str(log),
                 "--warehouse", wh]) == 0  # fmt: skip
    with duckdb.connect(wh, read_only=True) as con:
        trace = load_trace(con)
    reported = engine_reports(trace, np.full(trace.n_requests, 30))
    log.write_text("".join(gateway_line(i, int(c)) + "\n" for i, c in enumerate(reported)))
    steps = [
        ["ingest", "--format", "openai", "--tenant-field", "user", "--input", str(log)],
        ["ingest", "--format", "mooncake", "--block-size", "16", "--tenant", ODD,
         "--input", str(mooncake)],
        ["simulate", "--policy", "ceiling,lru", "--capacity-blocks", "20,80", "--outcomes"],
        ["validate", "--resamples", "5"],
        ["savings", "--policy", "lru", "--capacity-blocks", "80"],
        ["plan"],
    ]  # fmt: skip
    for words in steps:
        assert main([*words, "--warehouse", wh]) == 0, words
    return Path(wh)


def samples(text: str, parse=openmetrics) -> dict[str, dict[tuple, float]]:  # type: ignore[no-untyped-def]
    out: dict[str, dict[tuple, float]] = {}
    for family in parse(text):
        for s in family.samples:
            key = tuple(sorted(s.labels.items()))
            assert key not in out.setdefault(s.name, {})  # a series is named once
            out[s.name][key] = s.value
    return out


def labelled(**labels: object) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def test_the_file_parses_back_to_the_views_values(warehouse, tmp_path, capsys) -> None:
    out = tmp_path / "prefixscope.prom"
    assert main(["metrics", "--warehouse", str(warehouse), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.endswith("# EOF\n")
    got = samples(text)
    assert samples(text, classic) == got  # node_exporter's classic text parser reads the same
    con = duckdb.connect(str(warehouse), read_only=True)
    hit = {
        labelled(tenant=t, policy=p, policy_options="", isolation=i,
                 capacity_blocks="unbounded" if c is None else c, block_size=b, window=w): r
        for t, p, i, c, b, w, r in con.execute(
            "SELECT tenant, policy, isolation, capacity_blocks, block_size, measure_window, "
            "token_hit_rate FROM latest_hit_rates"
        ).fetchall()
    }  # fmt: skip
    assert got["prefixscope_token_hit_ratio"] == hit and len(hit) >= 5 * 3
    [(tenants,)] = con.execute("SELECT list(DISTINCT tenant) FROM latest_hit_rates").fetchall()
    assert ODD in tenants and ODD in {dict(k)["tenant"] for k in hit}
    capacity = dict(con.execute(
        "SELECT tenant, capacity_blocks FROM latest_validation WHERE capacity_blocks IS NOT NULL"
    ).fetchall())  # fmt: skip
    assert capacity and got["prefixscope_effective_capacity_blocks"] == {
        labelled(tenant=t, policy="lru"): c for t, c in capacity.items()
    }
    saved = con.execute("SELECT tenant, gpu_seconds_saved_per_hour FROM latest_savings").fetchall()
    assert sorted(
        (dict(k)["tenant"], v) for k, v in got["prefixscope_gpu_seconds_saved_per_hour"].items()
    ) == sorted(saved)
    plan = con.execute(
        "SELECT kind, tenant, policy, measure_window, capacity_blocks FROM latest_plan "
        "WHERE capacity_blocks IS NOT NULL"
    ).fetchall()
    assert plan and got["prefixscope_plan_capacity_blocks"] == {
        labelled(kind=k, tenant=t, policy=p, window=w): c for k, t, p, w, c in plan
    }
    last = dict(con.execute(
        "SELECT command, epoch(max(finished_at)) FROM runs WHERE status = 'succeeded' GROUP BY 1"
    ).fetchall())  # fmt: skip
    assert {dict(k)["command"]: v for k, v in
            got["prefixscope_last_success_timestamp_seconds"].items()} == last  # fmt: skip
    assert set(last) == {"ingest", "simulate", "validate", "savings", "plan"}
    con.close()


def test_names_help_types_and_units_follow_the_conventions(warehouse) -> None:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        text = metrics_text(con)
    families = list(openmetrics(text))
    assert len(families) >= 12
    for f in families:
        assert re.fullmatch(r"prefixscope_[a-z0-9_]+", f.name) and f.type == "gauge"
        assert not f.name.endswith("_total") and f.documentation
        assert f.unit == "" or f.name.endswith("_" + f.unit)
        assert f"# HELP {f.name} " in text and f"# TYPE {f.name} gauge" in text
    declared = {g.name for s in SOURCES for g in s.gauges}
    assert {f.name for f in families} <= declared
    assert "NaN" not in text  # a NULL is left out, never written as NaN


SLO_VIEW = """
CREATE OR REPLACE TABLE plan_slo_answers (run_id VARCHAR, load_scale DOUBLE, slo VARCHAR,
    prefix_caching BOOLEAN, met BOOLEAN, deployment VARCHAR, replicas INTEGER, gpus INTEGER,
    router VARCHAR, dram_gib_per_replica DOUBLE, store_gib DOUBLE, usd_per_hour DOUBLE,
    ttft_p95_s DOUBLE, binding VARCHAR, fleets_searched INTEGER, gpus_saved INTEGER,
    usd_saved_per_month DOUBLE);
INSERT INTO plan_slo_answers VALUES
    ('r', 1.0, 'ttft_p95<=2s', true, true, 'h100x1', 3, 3, 'prefix', 0, 0, 12.0, 1.5, 'ttft',
     9, 2, 2920.0),
    ('r', 1.0, 'ttft_p95<=2s', false, true, 'h100x1', 5, 5, 'round-robin', 0, 0, 20.0, 1.9,
     'ttft', 9, NULL, NULL);
CREATE OR REPLACE VIEW latest_plan_slo_answers AS SELECT * FROM plan_slo_answers;
"""


def test_the_slo_planners_answer_when_the_warehouse_has_one(warehouse, tmp_path) -> None:
    """The view another piece adds (its schema in the shared interface): exported when it is
    there, and no family of it (nor an error) when it is not."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        assert "prefixscope_plan_slo" not in metrics_text(con)
    copy = tmp_path / "slo.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    with duckdb.connect(str(copy)) as con:
        con.execute(SLO_VIEW)
        got = samples(metrics_text(con))
    on = labelled(load_scale="1", prefix_caching="true", slo="ttft_p95<=2s", deployment="h100x1",
                  router="prefix")  # fmt: skip
    off = labelled(load_scale="1", prefix_caching="false", slo="ttft_p95<=2s",
                   deployment="h100x1", router="round-robin")  # fmt: skip
    assert got["prefixscope_plan_slo_gpus"] == {on: 3, off: 5}
    assert got["prefixscope_plan_slo_usd_saved_per_month"] == {on: 2920.0}
    assert got["prefixscope_plan_slo_met"] == {on: 1, off: 1}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    out = tmp_path / "m.prom"
    out.write_text("old\n")

    def lines():  # type: ignore[no-untyped-def]
        yield "prefixscope_a 1"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic.write_lines(out, lines())
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["m.prom"]
    atomic.write_text(out, "new\n")
    assert out.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["m.prom"]


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("{tmp}/missing/m.prom", "does not exist"),
        ("{tmp}", "is a directory"),
    ],
)
def test_a_bad_out_is_one_line_exit_2(warehouse, tmp_path, capsys, out, says) -> None:
    capsys.readouterr()
    words = ["metrics", "--warehouse", str(warehouse), "--out", out.format(tmp=tmp_path)]
    assert main(words) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_no_two_rows_of_a_view_share_one_series(warehouse, tmp_path) -> None:
    """Two savings rows that differ only in their deployment, and two SLO answers whose load
    scales agree to six digits, are each their own series: none is dropped as a repeat."""
    copy = tmp_path / "m.duckdb"
    copy.write_bytes(warehouse.read_bytes())
    with duckdb.connect(str(copy)) as con:
        con.execute(SLO_VIEW)
        con.execute(
            "INSERT INTO plan_slo_answers SELECT * REPLACE (1.0000001 AS load_scale) "
            "FROM plan_slo_answers WHERE prefix_caching"
        )
        con.execute(
            "INSERT INTO savings SELECT * REPLACE ('h200x1' AS deployment) FROM savings "
            "WHERE run_id = (SELECT max(run_id) FROM savings)"
        )
        rows = con.execute("SELECT count(*) FROM latest_savings").fetchone()[0]
        got = samples(metrics_text(con))
    assert len(got["prefixscope_gpu_seconds_saved_per_hour"]) == rows
    scales = {dict(k)["load_scale"] for k in got["prefixscope_plan_slo_gpus"]}
    assert scales == {"1", "1.0000001"}

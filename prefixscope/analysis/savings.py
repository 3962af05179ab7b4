"""What the prefix cache saves: per-request outcomes joined with a prefill cost model.

A request of ``input`` tokens that hit on ``hit`` tokens costs ``T(input, 0)`` without a cache
and ``T(new, input - new)`` with it, ``new = max(1, input - hit)`` (a full hit still computes
its last token). ``T`` is a calibrated cost model (``miss_cost_models``) when the warehouse has
one for the model and GPU, else the roofline (``roofline.py``). Only the prefill is priced:
decode reads the whole KV cache per generated token whether or not the prefix was cached, so
the prefix cache leaves it unchanged and the end-to-end gain is bounded by the prefill share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from prefixscope import sql
from prefixscope.analysis.costmodel import CostModel
from prefixscope.analysis.gpus import resolve_gpu
from prefixscope.analysis.models import resolve_model
from prefixscope.analysis.roofline import prefill_cost
from prefixscope.warehouse import FLEET, recorded_run

#: What a roofline saving is computed for unless the user says otherwise.
DEFAULT_MODEL = "llama-3-8b"
DEFAULT_GPU = "h100"
COST_MODEL_KINDS = ("auto", "calibrated", "roofline")

SAVINGS_SCHEMA = pa.schema(
    [
        ("outcomes_run_id", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("tenant", pa.string()),
        ("model", pa.string()),
        ("gpu", pa.string()),
        ("cost_model", pa.string()),
        ("cost_model_run_id", pa.string()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("traffic_seconds", pa.float64()),
        ("prefill_gpu_seconds_no_cache", pa.float64()),
        ("prefill_gpu_seconds_with_cache", pa.float64()),
        ("gpu_seconds_saved", pa.float64()),
        ("saved_share", pa.float64()),
        ("gpu_seconds_saved_per_hour", pa.float64()),
        ("ttft_p50_no_cache_s", pa.float64()),
        ("ttft_p95_no_cache_s", pa.float64()),
        ("ttft_p50_with_cache_s", pa.float64()),
        ("ttft_p95_with_cache_s", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Configuration:
    """One simulated configuration whose request_outcomes are priced."""

    run_id: str
    policy: str
    isolation: str
    capacity_blocks: int | None


@dataclass(frozen=True)
class MissCost:
    """A prefill cost model ready to price requests: seconds(new, cached)."""

    kind: str  # 'calibrated' or 'roofline'
    model: str
    gpu: str
    seconds: Callable[[np.ndarray, np.ndarray], np.ndarray]
    run_id: str | None = None  # the replay run that fitted it


def choose_configuration(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    policy: str | None = None,
    capacity_blocks: int | None = None,
    isolation: str | None = None,
) -> Configuration:
    """The one configuration with request_outcomes that matches (the newest run's, when no run
    is named); an error lists the candidates when none or several match."""
    rows = [
        Configuration(r, p, i, c)
        for r, p, i, c, _ in con.execute(sql.load("marts/outcome_configurations")).fetchall()
    ]
    if not rows:
        raise ValueError("no request_outcomes yet: run `prefixscope simulate --outcomes` first")
    match = [
        c
        for c in rows
        if (run_id is None or c.run_id == run_id)
        and (policy is None or c.policy == policy)
        and (capacity_blocks is None or c.capacity_blocks == capacity_blocks)
        and (isolation is None or c.isolation == isolation)
    ]
    if match and run_id is None:
        match = [c for c in match if c.run_id == match[0].run_id]  # the newest run's
    if len(match) != 1:
        known = "; ".join(
            f"{c.policy} {c.isolation} {c.capacity_blocks or 'unbounded'} (run {c.run_id})"
            for c in (match or rows)[:12]
        )
        what = "several configurations match" if match else "no configuration matches"
        raise ValueError(f"{what}; choose with --policy/--capacity-blocks/--outcomes-run: {known}")
    return match[0]


def resolve_cost_model(
    con: duckdb.DuckDBPyConnection, model: str, gpu: str, kind: str = "auto"
) -> MissCost:
    """The newest calibrated model of (model, gpu) for ``auto`` and ``calibrated``; the roofline
    for ``roofline``, or for ``auto`` when none was calibrated."""
    if kind not in COST_MODEL_KINDS:
        raise ValueError(f"unknown cost model {kind!r}; known: {', '.join(COST_MODEL_KINDS)}")
    shape = resolve_model(model)
    gpu_key = "cpu" if gpu.lower() == "cpu" else None
    if kind != "roofline":
        gpu_key = gpu_key or resolve_gpu(gpu).name
        found = con.execute(
            "SELECT m.run_id, coef_a, coef_new, coef_cached, coef_new_cached, coef_new_sq, "
            "knee_linear_tokens, knee_attention_tokens "
            "FROM miss_cost_models m JOIN runs r USING (run_id) "
            "WHERE r.status = 'succeeded' AND m.model = ? AND m.gpu = ? "
            "ORDER BY r.finished_at DESC LIMIT 1",
            [shape.name, gpu_key],
        ).fetchall()
        if found:
            row = found[0]
            coef = CostModel(tuple(float(c) for c in row[1:6]), (row[6], row[7]))
            return MissCost("calibrated", shape.name, gpu_key, coef.seconds, row[0])
        if kind == "calibrated":
            raise ValueError(f"no calibrated cost model of {shape.name} on {gpu_key}: run replay")
    if gpu_key == "cpu":
        raise ValueError("the roofline needs a GPU spec (--gpu h100, or NAME:TFLOPS:TBPS)")
    spec = resolve_gpu(gpu)
    return MissCost(
        "roofline",
        shape.name,
        spec.name,
        lambda new, cached: np.asarray(prefill_cost(shape, spec, new, cached).seconds),
    )


def savings_rows(outcomes: pl.DataFrame, traffic_s: float | None, cost: MissCost) -> list[dict]:
    """Rows of SAVINGS_SCHEMA (without the configuration) for the fleet and each tenant.

    ``outcomes``: one row per request with ``tenant``, ``input_tokens``, ``hit_tokens``.
    """
    inp = outcomes["input_tokens"].to_numpy().astype(np.float64)
    hit = outcomes["hit_tokens"].to_numpy().astype(np.float64)
    new = np.maximum(inp - hit, 1.0)
    without = np.asarray(cost.seconds(inp, np.zeros_like(inp)), dtype=np.float64)
    with_cache = np.asarray(cost.seconds(new, inp - new), dtype=np.float64)
    tenants = outcomes["tenant"].to_numpy()
    groups = [(FLEET, np.ones(len(inp), dtype=bool))]
    groups += [(t, tenants == t) for t in sorted(set(tenants.tolist()))]
    rows = []
    for tenant, sel in groups:
        if not sel.any():
            continue
        no, yes = float(without[sel].sum()), float(with_cache[sel].sum())
        saved = no - yes
        rows.append(
            {
                "tenant": tenant,
                "model": cost.model,
                "gpu": cost.gpu,
                "cost_model": cost.kind,
                "cost_model_run_id": cost.run_id,
                "requests": int(sel.sum()),
                "input_tokens": int(inp[sel].sum()),
                "hit_tokens": int(hit[sel].sum()),
                "traffic_seconds": traffic_s,
                "prefill_gpu_seconds_no_cache": no,
                "prefill_gpu_seconds_with_cache": yes,
                "gpu_seconds_saved": saved,
                "saved_share": saved / no if no > 0 else None,
                "gpu_seconds_saved_per_hour": saved * 3600 / traffic_s if traffic_s else None,
                "ttft_p50_no_cache_s": float(np.percentile(without[sel], 50)),
                "ttft_p95_no_cache_s": float(np.percentile(without[sel], 95)),
                "ttft_p50_with_cache_s": float(np.percentile(with_cache[sel], 50)),
                "ttft_p95_with_cache_s": float(np.percentile(with_cache[sel], 95)),
            }
        )
    return rows


def load_outcomes(
    con: duckdb.DuckDBPyConnection, config: Configuration
) -> tuple[pl.DataFrame, float | None]:
    """The configuration's per-request outcomes, and the arrival span of those requests."""
    where = (
        "o.run_id = $1 AND o.policy = $2 AND o.isolation = $3 AND "
        "o.capacity_blocks IS NOT DISTINCT FROM $4"
    )
    args = [config.run_id, config.policy, config.isolation, config.capacity_blocks]
    df = pl.DataFrame(
        con.sql(
            f"SELECT o.tenant, o.input_tokens, o.hit_tokens FROM request_outcomes o WHERE {where}",
            params=args,
        ).to_arrow_table()
    )
    ((span,),) = con.execute(
        "SELECT epoch(max(q.arrival_ts)) - epoch(min(q.arrival_ts)) FROM request_outcomes o "
        f"JOIN requests q USING (request_id) WHERE {where}",
        args,
    ).fetchall()
    traffic = None if span is None or span <= 0 else float(span)
    return df, traffic


def compute_savings(
    con: duckdb.DuckDBPyConnection, config: Configuration, cost: MissCost
) -> pa.Table:
    outcomes, traffic = load_outcomes(con, config)
    rows = [
        {
            "outcomes_run_id": config.run_id,
            "policy": config.policy,
            "isolation": config.isolation,
            "capacity_blocks": config.capacity_blocks,
            **row,
        }
        for row in savings_rows(outcomes, traffic, cost)
    ]
    return pa.Table.from_pylist(rows, schema=SAVINGS_SCHEMA)


def run_savings(
    con: duckdb.DuckDBPyConnection,
    model: str = DEFAULT_MODEL,
    gpu: str = DEFAULT_GPU,
    cost_model: str = "auto",
    outcomes_run: str | None = None,
    policy: str | None = None,
    capacity_blocks: int | None = None,
    isolation: str | None = None,
) -> pa.Table:
    """Price the chosen configuration's outcomes, store the rows under a ``savings`` run and
    return them."""
    params = {
        "model": model,
        "gpu": gpu,
        "cost_model": cost_model,
        "outcomes_run": outcomes_run,
        "policy": policy,
        "capacity_blocks": capacity_blocks,
        "isolation": isolation,
    }
    with recorded_run(con, "savings", params) as run_id:
        config = choose_configuration(con, outcomes_run, policy, capacity_blocks, isolation)
        table = compute_savings(con, config, resolve_cost_model(con, model, gpu, cost_model))
        con.register("new_rows", table)
        try:
            con.execute("INSERT INTO savings BY NAME SELECT ? AS run_id, * FROM new_rows", [run_id])
        finally:
            con.unregister("new_rows")
    return table

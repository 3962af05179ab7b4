"""Inputs of the stages that price simulated requests (``replay``, ``savings``): which
configuration's ``request_outcomes`` to use, its rows, and the newest fitted cost model."""

from __future__ import annotations

import duckdb
import polars as pl

from prefixscope import sql
from prefixscope.analysis.cost import shipped
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.savings import Configuration, gpu_key


def choose_configuration(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    policy: str | None = None,
    capacity_blocks: int | None = None,
    isolation: str | None = None,
    pool: tuple[str, int] | None = None,
) -> Configuration:
    """The one configuration with request_outcomes that matches (the newest run's, when no run
    is named); an error lists the candidates when none or several match. ``pool``: a
    deployment's name and its KV pool in blocks: only a configuration whose cache that pool
    holds is a candidate, and of several capacities the largest (the most the deployment
    holds) is taken; a capacity asked beyond the pool is refused."""
    rows = [
        Configuration(r, p, i, c)
        for r, p, i, c, _ in con.execute(sql.load("views/outcome_configurations")).fetchall()
    ]
    if not rows:
        raise ValueError("no request_outcomes yet — run `prefixscope simulate --outcomes` first")
    if pool is not None and capacity_blocks is not None and capacity_blocks > pool[1]:
        raise ValueError(
            f"--capacity-blocks {capacity_blocks:,} is more KV than {pool[0]}'s pool of "
            f"{pool[1]:,} blocks — give at most {pool[1]:,}, or a deployment with more GPUs"
        )
    match = [
        c
        for c in rows
        if (run_id is None or c.run_id == run_id)
        and (policy is None or c.policy == policy)
        and (capacity_blocks is None or c.capacity_blocks == capacity_blocks)
        and (isolation is None or c.isolation == isolation)
    ]
    if pool is not None:
        fits = [c for c in match if c.capacity_blocks is not None and c.capacity_blocks <= pool[1]]
        if match and not fits:
            raise ValueError(
                f"no simulated configuration fits {pool[0]}'s KV pool of {pool[1]:,} blocks "
                f"(the smallest matching holds {_smallest(match)}) — simulate one that does: "
                f"`prefixscope simulate --outcomes --capacity-blocks {pool[1]}`"
            )
        match = fits
    if match and run_id is None:
        match = [c for c in match if c.run_id == match[0].run_id]  # the newest run's
    if pool is not None and match:
        largest = max(int(c.capacity_blocks or 0) for c in match)
        match = [c for c in match if c.capacity_blocks == largest]
    if len(match) != 1:
        known = "; ".join(
            f"{c.policy} {c.isolation} {c.capacity_blocks or 'unbounded'} (run {c.run_id})"
            for c in (match or rows)[:12]
        )
        what = "several configurations match" if match else "no configuration matches"
        raise ValueError(
            f"{what} — choose one with --policy/--capacity-blocks/--outcomes-run: {known}"
        )
    return match[0]


def _smallest(configs: list[Configuration]) -> str:
    caps = [c.capacity_blocks for c in configs if c.capacity_blocks is not None]
    return f"{min(caps):,} blocks" if caps else "an unbounded cache"


def load_outcomes(
    con: duckdb.DuckDBPyConnection, config: Configuration
) -> tuple[pl.DataFrame, float | None]:
    """The configuration's per-request outcomes, and the arrival span of those requests."""
    ((span,),) = con.execute(
        "SELECT epoch(max(arrival_ts)) - epoch(min(arrival_ts)) FROM requests WHERE request_id "
        f"IN (SELECT request_id FROM request_outcomes WHERE {_OF_CONFIG})",
        _params(config),
    ).fetchall()
    traffic = None if span is None or span <= 0 else float(span)
    rows = con.sql(
        f"SELECT tenant, input_tokens, hit_tokens FROM request_outcomes WHERE {_OF_CONFIG}",
        params=_params(config),
    ).to_arrow_table()
    return pl.DataFrame(rows), traffic


def calibrated(
    con: duckdb.DuckDBPyConnection, model: str | ModelShape, gpu: str | GpuSpec | None
) -> tuple[str, tuple[float, ...], tuple[float, float]] | None:
    """The newest cost model fitted for (model, gpu) by a succeeded replay or calibrate run: its
    run id, coefficients and knees; else the shipped one (``analysis/cost/shipped.py``), its
    source ``shipped:FILE`` in the run id's place; None when there is neither."""
    shape = model if isinstance(model, ModelShape) else resolve_model(model)
    name, key = shape.name, gpu_key(gpu)
    found = con.execute(
        "SELECT m.run_id, coef_a, coef_new, coef_cached, coef_new_cached, coef_new_sq, "
        "knee_linear_tokens, knee_attention_tokens "
        "FROM miss_cost_models m JOIN runs r USING (run_id) "
        "WHERE r.status = 'succeeded' AND m.model = ? AND m.gpu = ? "
        "ORDER BY r.finished_at DESC LIMIT 1",
        [name, key],
    ).fetchall()
    if not found:
        ship = shipped.find(name, key)
        if ship is None:
            return None
        return ship.source, ship.calibration.coefficients, ship.calibration.knees
    row = found[0]
    return row[0], tuple(float(c) for c in row[1:6]), (row[6], row[7])


def outcome_rows(con: duckdb.DuckDBPyConnection, config: Configuration) -> pl.DataFrame:
    """Request id, tenant, input and hit tokens of every request of ``config``, by id."""
    return pl.DataFrame(
        con.sql(
            "SELECT request_id, tenant, input_tokens, hit_tokens FROM request_outcomes "
            f"WHERE {_OF_CONFIG} ORDER BY request_id",
            params=_params(config),
        ).to_arrow_table()
    )


#: The rows of ``request_outcomes`` that belong to one configuration (parameters: _params).
_OF_CONFIG = (
    "run_id = $1 AND policy = $2 AND isolation = $3 AND capacity_blocks IS NOT DISTINCT FROM $4"
)


def _params(config: Configuration) -> list[object]:
    return [config.run_id, config.policy, config.isolation, config.capacity_blocks]

"""Stage ``plan``: from the stored curves, simulations and fleet runs, the smallest capacity per
policy, the value of the next GiB and the cheapest fleet that reach a target share of the
ceiling → ``plan``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.cost.choice import check_kind, wants_calibration
from prefixscope.analysis.cost.deployment import fitting
from prefixscope.analysis.cost.gpus import GPUS, GpuSpec
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.cost.resolved import ResolvesGpu, ResolvesModel, ResolvesPrices
from prefixscope.analysis.cost.savings import DEFAULT_GPU, DEFAULT_MODEL, cost_model
from prefixscope.analysis.fanout import fan_out
from prefixscope.analysis.plan.capacity import Point, hit_tokens_at
from prefixscope.analysis.plan.fleets import configuration_rows
from prefixscope.analysis.plan.plan import PLAN_WINDOWS, Sizing, capacity_rows, plan_table
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.tail import tail, tail_start
from prefixscope.stages.outcomes import calibrated


@dataclass(frozen=True)
class PlanSettings(ResolvesModel, ResolvesGpu, ResolvesPrices):
    """``target``: the share of the ceiling to reach; ``window``: the requests measured (the same
    at every capacity); ``model`` / ``kv_dtype``: blocks to GiB; ``model`` / ``gpu`` /
    ``cost_model``: what prices a miss; ``prices``: a TOML file of prices (default: the
    documented round figures; a GPU-hour is each GPU's catalog price unless it gives one);
    ``load_scale``: the fleet runs to choose among."""

    target: float = 0.9
    window: str = "all"
    model: str = DEFAULT_MODEL
    #: A name or a GPU file, or the spec the command line resolved it to.
    gpu: str | GpuSpec = DEFAULT_GPU
    kv_dtype: str = "bf16"
    cost_model: str = "auto"
    #: A TOML file of prices, or the prices the command line read from it.
    prices: str | Prices | None = None
    load_scale: float = 1.0
    #: A config.json whose shape ``model`` names (``resolve_model``).
    model_config: str | None = None
    #: The value of the next GiB on the last requests holding at most this many lookups
    #: (``trace/tail.py``) when the trace holds more; None: the whole trace, over ``window``.
    max_lookups: int | None = None
    #: Where the simulations of the next GiB run (``analysis/fanout.py``).
    workers: int | None = 1
    dask_address: str | None = None

    def check(self) -> Prices:
        if not 0 < self.target <= 1:
            raise ValueError(f"the target is a share of the ceiling, in (0, 1]: {self.target}")
        if self.window not in PLAN_WINDOWS:
            raise ValueError(
                f"the planner measures over {' or '.join(PLAN_WINDOWS)} (the same requests at "
                f"every capacity), not {self.window!r}"
            )
        check_kind(self.cost_model, self.shape, self.device, self.tp)
        return self.price_table

    @cached_property
    def tp(self) -> int:
        """The GPUs a prefill of ``model`` runs on: the fewest of ``gpu`` that hold it (1 for
        the CPU or a GPU without an HBM figure), so the next GiB's GPU-seconds count them all."""
        found = fitting(self.device, self.shape)
        return 1 if found is None else found.tp


def plan_capacity(wh: str | Path, settings: PlanSettings) -> pa.Table:
    prices = settings.check()
    with warehouse.StageRun(wh, "plan", settings) as stage_run:
        with stage_run.reading() as con:
            trace = load_trace(con)
            ceilings = _ceilings(con, settings.window, trace.block_size)
            points = _points(con, settings.window, trace.block_size)
            fleet_rows = _fleet_rows(con, settings.window)
            _check_load_scale(fleet_rows, settings.load_scale)
            fitted = calibrated(
                con, settings.shape, settings.device
            ) if wants_calibration(settings.cost_model, settings.tp) else None  # fmt: skip
        if not ceilings:
            raise ValueError(
                f"no simulation over the {settings.window!r} window to plan from — run "
                f"`prefixscope simulate --policy ceiling,lru --capacity-blocks … "
                f"--window {settings.window}` first"
            )
        cost = cost_model(
            settings.shape, settings.device, settings.cost_model, fitted, tp=settings.tp
        )
        shape = settings.shape
        sizing = Sizing(
            cost.model,
            cost.gpu,
            cost.kind,
            float(shape.kv_bytes_per_token(settings.kv_dtype) * trace.block_size),
            lambda new, cached: cost.seconds(new, cached) * cost.gpus,  # GPU-seconds
            settings.kv_dtype,
        )
        recent = tail(trace, tail_start(trace, settings.max_lookups))
        rows = capacity_rows(
            trace,
            settings.window,
            settings.target,
            ceilings,
            points,
            sizing,
            recent,
            lambda pairs: _hits_at(recent, pairs, settings),
        )
        rows += configuration_rows(
            fleet_rows,
            settings.window,
            settings.target,
            prices,
            sizing,
            trace.n_unique,
            settings.load_scale,
            _gpu_files(settings.device),
        )
        table = plan_table(rows)
        with stage_run.publishing() as con:
            warehouse.append(con, "plan", table, stage_run.run_id)
    return table


def _hits_at(
    trace: Trace, pairs: Sequence[tuple[str, int]], settings: PlanSettings
) -> dict[tuple[str, int], np.ndarray]:
    """``hit_tokens_at``, its replays as tasks where ``settings`` say (LRU, one pass, here)."""
    lru = [p for p in pairs if p[0] == "lru"]
    others = [p for p in pairs if p[0] != "lru"]
    out = hit_tokens_at(trace, lru)
    if settings.dask_address is None and settings.workers == 1:
        out |= hit_tokens_at(trace, others)
    else:
        done = fan_out(
            _hits_task, trace, others, workers=settings.workers, dask_address=settings.dask_address
        )
        out |= dict(zip(others, done, strict=True))
    return out


def _hits_task(trace: Trace, pair: tuple[str, int]) -> np.ndarray:
    """One replay of :func:`_hits_at` (a task)."""
    return hit_tokens_at(trace, [pair])[pair]


def _ceilings(con: duckdb.DuckDBPyConnection, window: str, block_size: int) -> dict[str, float]:
    """Per tenant, the unbounded cache's rate over the window, from the newest simulation at
    the warehouse's block size."""
    found = con.execute(
        "SELECT tenant, ceiling_token_hit_rate FROM latest_hit_rates "
        "WHERE measure_window = ? AND isolation = 'shared' AND ceiling_token_hit_rate IS NOT NULL "
        "AND block_size = ? "
        "QUALIFY row_number() OVER (PARTITION BY tenant ORDER BY policy <> 'ceiling') = 1",
        [window, block_size],
    ).fetchall()
    return {t: float(r) for t, r in found}


def _points(
    con: duckdb.DuckDBPyConnection, window: str, block_size: int
) -> dict[tuple[str, str], list[Point]]:
    """Every stored (capacity, rate) of a bounded policy's shared cache over the window at the
    warehouse's block size: the simulations (``hit_rates``) and the exact curves (``mrc``, not
    sampled)."""
    bounded = [name for name, p in POLICIES.items() if p.bounded]
    rows = con.execute(
        "SELECT tenant, policy, capacity_blocks, token_hit_rate, 'hit_rates', run_id "
        "FROM latest_hit_rates WHERE measure_window = ? AND isolation = 'shared' "
        "AND policy_options IS NULL AND capacity_blocks IS NOT NULL "
        "AND token_hit_rate IS NOT NULL AND list_contains(?, policy) AND block_size = ? "
        "UNION ALL "
        "SELECT tenant, policy, capacity_blocks, token_hit_rate, 'mrc', run_id FROM latest_mrc "
        "WHERE measure_window = ? AND isolation = 'shared' AND exact "
        "AND token_hit_rate IS NOT NULL AND list_contains(?, policy) AND block_size = ?",
        [window, bounded, block_size, window, bounded, block_size],
    ).fetchall()
    out: dict[tuple[str, str], dict[int, Point]] = {}
    for tenant, policy, capacity, rate, table, run_id in rows:
        mine = out.setdefault((tenant, policy), {})
        if capacity not in mine or table == "hit_rates":  # a simulation over a curve's point
            mine[capacity] = Point(int(capacity), float(rate), table, run_id)
    return {k: list(v.values()) for k, v in out.items()}


def _check_load_scale(fleet_rows: list[dict], load_scale: float) -> None:
    """Fleet runs that exist, but none at the load scale asked: say which there are (else the
    plan would read as if no fleet had been simulated at all)."""
    scales = sorted({r["load_scale"] for r in fleet_rows})
    if scales and load_scale not in scales:
        shown = ", ".join(f"{x:g}" for x in scales[:8])
        raise ValueError(
            f"no fleet was simulated at --load-scale {load_scale:g} (the fleet runs are at "
            f"{shown}) — run `prefixscope fleet --load-scale {load_scale:g} …`, or plan at "
            "one of those"
        )


def _fleet_rows(con: duckdb.DuckDBPyConnection, window: str) -> list[dict]:
    """The fleet runs over the window, each with whether its caches filled (its 'steady' row
    of the same configuration, when the run measured one)."""
    same = " AND ".join(
        f"h.{c} IS NOT DISTINCT FROM s.{c}"
        for c in (
            "run_id", "tenant", "router", "replicas", "capacity_blocks", "policy", "load_scale",
            "dram_blocks", "dram_gbps", "store_blocks", "store_unbounded", "store_gbps", "model",
            "gpu", "deployment",
        )
    )  # fmt: skip
    table = con.sql(
        "SELECT h.*, s.steady AS filled FROM latest_fleet_hit_rates h "
        "LEFT JOIN (SELECT * FROM latest_fleet_hit_rates WHERE measure_window = 'steady') s "
        f"ON {same} WHERE h.measure_window = $window",
        params={"window": window},
    ).to_arrow_table()
    return table.to_pylist()


def _gpu_files(gpu: GpuSpec | None) -> dict[str, GpuSpec]:
    """The GPU this plan was given where the catalog does not hold it (``--gpu FILE.toml``, or
    ``NAME:TFLOPS:TBPS``), by the name its fleets' rows store."""
    if gpu is None or GPUS.get(gpu.name.lower()) == gpu:
        return {}
    return {gpu.name.lower(): gpu}

"""The SLO search's tables: ``plan_slo_fleets`` (every fleet simulated) and
``plan_slo_answers`` (per load scale and caching on/off, the cheapest fleet that meets the
SLO, and on the caching row what the cache saves against the no-cache answer).

A month is :data:`HOURS_PER_MONTH` hours (365 × 24 / 12 = 730, the convention cloud price
lists use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa

from prefixscope.analysis.plan.held import Held
from prefixscope.analysis.plan.per_window import GpuHours, Sized, key
from prefixscope.analysis.plan.search import Fleet, Outcome
from prefixscope.analysis.plan.slo import Slo
from prefixscope.analysis.plan.windows import Window

HOURS_PER_MONTH = 730.0

PLAN_SLO_FLEETS_SCHEMA = pa.schema(
    [
        ("load_scale", pa.float64()),
        ("prefix_caching", pa.bool_()),
        ("engine", pa.string()),
        ("deployment", pa.string()),
        ("gpu", pa.string()),
        ("tp", pa.int32()),
        ("replicas", pa.int32()),
        ("gpus", pa.int32()),
        ("router", pa.string()),
        ("dram_gib_per_replica", pa.float64()),
        ("store_gib", pa.float64()),
        ("kv_pool_gib_per_gpu", pa.float64()),
        ("token_hit_rate", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("ttft_p99_s", pa.float64()),
        ("tpot_p95_s", pa.float64()),
        ("usd_per_hour", pa.float64()),
        ("meets_slo", pa.bool_()),
        ("binding", pa.string()),
        ("window_start_s", pa.float64()),
        ("window_end_s", pa.float64()),
        ("stopped_early", pa.bool_()),
    ]
)

PLAN_SLO_ANSWERS_SCHEMA = pa.schema(
    [
        ("load_scale", pa.float64()),
        ("slo", pa.string()),
        ("prefix_caching", pa.bool_()),
        ("met", pa.bool_()),
        ("deployment", pa.string()),
        ("replicas", pa.int32()),
        ("gpus", pa.int32()),
        ("router", pa.string()),
        ("dram_gib_per_replica", pa.float64()),
        ("store_gib", pa.float64()),
        ("usd_per_hour", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("binding", pa.string()),
        ("fleets_searched", pa.int64()),
        ("gpus_saved", pa.int32()),
        ("usd_saved_per_month", pa.float64()),
        ("window_s", pa.float64()),
        ("windows", pa.int32()),
        ("windows_searched", pa.int32()),
        ("windows_checked", pa.int32()),
        ("bound_window_start_s", pa.float64()),
        ("bound_window_end_s", pa.float64()),
        ("cost_model", pa.string()),
        ("slower_pct", pa.float64()),
        ("gpus_if_slower", pa.int32()),
        ("usd_per_hour_if_slower", pa.float64()),
        ("gpu_hours_static", pa.float64()),
        ("gpu_hours_per_window", pa.float64()),
        ("windows_unmet_alone", pa.int32()),
    ]
)

PLAN_SLO_WINDOWS_SCHEMA = pa.schema(
    [
        ("load_scale", pa.float64()),
        ("prefix_caching", pa.bool_()),
        ("window_start_s", pa.float64()),
        ("window_end_s", pa.float64()),
        ("requests", pa.int64()),
        ("met", pa.bool_()),
        ("deployment", pa.string()),
        ("replicas", pa.int32()),
        ("gpus", pa.int32()),
        ("router", pa.string()),
        ("dram_gib_per_replica", pa.float64()),
        ("store_gib", pa.float64()),
        ("usd_per_hour", pa.float64()),
        ("token_hit_rate", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("binding", pa.string()),
    ]
)


def fleet_row(f: Fleet, engine: str, windows: Sequence[Window] = ()) -> dict:
    s, p, m = f.probe.series, f.probe, f.result.metrics
    w = windows[f.result.window] if windows else None
    return {
        "load_scale": p.load_scale,
        "prefix_caching": p.prefix_caching,
        "engine": engine,
        "deployment": s.replica.deployment,
        "gpu": s.replica.gpu,
        "tp": s.replica.tp,
        "replicas": p.replicas,
        "gpus": f.gpus,
        "router": s.router,
        "dram_gib_per_replica": s.dram_gib,
        "store_gib": s.store_gib,
        "kv_pool_gib_per_gpu": s.replica.kv_pool_gib_per_gpu,
        "token_hit_rate": f.result.token_hit_rate,
        "ttft_p95_s": m["ttft-p95"],
        "ttft_p99_s": m["ttft-p99"],
        "tpot_p95_s": m["tpot-p95"],
        "usd_per_hour": f.usd_per_hour,
        "meets_slo": f.meets,
        "binding": f.binding,
        "window_start_s": None if w is None else w.start_s,
        "window_end_s": None if w is None else w.end_s,
        "stopped_early": f.result.stopped,
    }


def fleets_table(
    outcomes: Sequence[Outcome], engine: str, windows: Sequence[Window] = ()
) -> pa.Table:
    rows = [fleet_row(f, engine, windows) for o in outcomes for f in o.fleets]
    return pa.Table.from_pylist(rows, schema=PLAN_SLO_FLEETS_SCHEMA)


def answer_fleet(f: Fleet | None) -> dict:
    """The fleet columns an answer row carries (``plan_slo_answers``, ``plan_slo_windows``):
    all None without a fleet."""
    s = None if f is None else f.probe.series
    return {
        "deployment": None if s is None else s.replica.deployment,
        "replicas": None if f is None else f.probe.replicas,
        "gpus": None if f is None else f.gpus,
        "router": None if s is None else s.router,
        "dram_gib_per_replica": None if s is None else s.dram_gib,
        "store_gib": None if s is None else s.store_gib,
        "usd_per_hour": None if f is None else f.usd_per_hour,
        "ttft_p95_s": None if f is None else f.result.metrics["ttft-p95"],
        "binding": None if f is None else f.binding,
    }


def answer_rows(
    outcomes: Sequence[Outcome],
    slo: Slo,
    held: Sequence[Held] = (),
    windows: Sequence[Window] = (),
    window_s: float | None = None,
) -> list[dict]:
    """One row per outcome. ``met`` false: the fleet columns are the closest fleet searched
    (the greatest least slack), never an answer. The caching row carries ``gpus_saved`` and
    ``usd_saved_per_month`` against the no-cache row of its load scale, when both are met.
    With ``held`` (``held.py``): the windows, how many were searched and checked, and the one
    that bound the answer (``window_s`` None: the whole trace as one window)."""
    rows = []
    for i, o in enumerate(outcomes):
        f = o.best or o.closest
        h = held[i] if held else None
        bound = None if h is None or h.bound is None else windows[h.bound]
        rows.append(
            {
                "load_scale": o.group.load_scale,
                "slo": slo.text,
                "prefix_caching": o.group.prefix_caching,
                "met": o.best is not None,
                **answer_fleet(f),
                "fleets_searched": len(o.fleets),
                "gpus_saved": None,
                "usd_saved_per_month": None,
                "window_s": window_s if window_s is not None and math.isfinite(window_s) else None,
                "windows": len(windows) if windows else None,
                "windows_searched": None if h is None else len(h.searched),
                "windows_checked": None if h is None else h.checked,
                "bound_window_start_s": None if bound is None else bound.start_s,
                "bound_window_end_s": None if bound is None else bound.end_s,
                "cost_model": None,
                "slower_pct": None,
                "gpus_if_slower": None,
                "usd_per_hour_if_slower": None,
                "gpu_hours_static": None,
                "gpu_hours_per_window": None,
                "windows_unmet_alone": None,
            }
        )
    for row in rows:
        off = [r for r in rows if r["load_scale"] == row["load_scale"] and not r["prefix_caching"]]
        if row["prefix_caching"] and off and row["met"] and off[0]["met"]:
            row["gpus_saved"] = off[0]["gpus"] - row["gpus"]
            row["usd_saved_per_month"] = (
                off[0]["usd_per_hour"] - row["usd_per_hour"]
            ) * HOURS_PER_MONTH
    return rows


def answers_table(
    outcomes: Sequence[Outcome],
    slo: Slo,
    held: Sequence[Held] = (),
    windows: Sequence[Window] = (),
    window_s: float | None = None,
) -> pa.Table:
    rows = answer_rows(outcomes, slo, held, windows, window_s)
    return pa.Table.from_pylist(rows, schema=PLAN_SLO_ANSWERS_SCHEMA)


def windows_table(sized: Sequence[Sized]) -> pa.Table:
    """``plan_slo_windows``: each group's answer in each window searched alone
    (``per_window.py``); ``met`` false: no fleet searched meets there, fleet columns NULL."""
    rows = []
    for z in sized:
        f, w = z.best, z.window
        rows.append(
            {
                "load_scale": z.group.load_scale,
                "prefix_caching": z.group.prefix_caching,
                "window_start_s": w.start_s,
                "window_end_s": w.end_s,
                "requests": w.requests,
                "met": f is not None,
                **answer_fleet(f),
                "token_hit_rate": None if f is None else f.result.token_hit_rate,
            }
        )
    return pa.Table.from_pylist(rows, schema=PLAN_SLO_WINDOWS_SCHEMA)


def with_gpu_hours(rows: list[dict], hours: Sequence[GpuHours]) -> None:
    """The answers' GPU-hours, static and window by window (``per_window.gpu_hours``)."""
    by = {key(h.group): h for h in hours}
    for row in rows:
        h = by.get((row["load_scale"], row["prefix_caching"]))
        if h is not None:
            row["gpu_hours_static"] = h.static
            row["gpu_hours_per_window"] = h.scaled
            row["windows_unmet_alone"] = h.windows_unmet

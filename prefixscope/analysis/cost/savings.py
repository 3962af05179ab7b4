"""What the prefix cache saves: per-request outcomes joined with a prefill cost model.

A request of ``input`` tokens that hit on ``hit`` tokens costs ``T(input, 0)`` without a cache
and ``T(new, input - new)`` with it, ``new = max(1, input - hit)`` (a full hit still computes
its last token). ``T`` is chosen by ``choice.py``'s rule: a calibrated cost model
(``miss_cost_models``) when the warehouse has one for the model and GPU, else the
measured-kernel model (``measured.py``) itself (one prefill alone, not the fleet's fitted step
form) where its tables cover, else the roofline (``roofline.py``). Only the prefill is priced:
decode reads the whole KV cache per generated token whether or not the prefix was cached, so
the prefix cache leaves it unchanged and the end-to-end gain is bounded by the prefill share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from prefixscope.analysis.cost.choice import Fitted, chosen, device, measured_for
from prefixscope.analysis.cost.costmodel import CostModel
from prefixscope.analysis.cost.gpus import GpuSpec, resolve_gpu
from prefixscope.analysis.cost.measured import many
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.prices import GPU_SECONDS
from prefixscope.analysis.cost.roofline import prefill_cost
from prefixscope.analysis.cost.shipped import kind_of
from prefixscope.analysis.trace.measure import named_groups

#: What a roofline saving is computed for unless the user says otherwise.
DEFAULT_MODEL = "llama-3-8b"
DEFAULT_GPU = "h100"

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
        # the deployment priced (GPU[xTP]), its GPUs and its KV pool in the trace's blocks:
        # NULL for a GPU without an HBM figure, or the CPU
        ("deployment", pa.string()),
        ("gpus", pa.int32()),
        ("kv_pool_blocks", pa.int64()),
        # what the GPU-seconds count (``GPU_SECONDS``), one GPU's $ an hour and what the
        # saving is worth an hour in dollars (NULL where no GPU is priced: the CPU)
        ("gpu_seconds_unit", pa.string()),
        ("gpu_hour", pa.float64()),
        ("usd_saved_per_hour", pa.float64()),
    ]
)
#: The deployment columns of ``SAVINGS_SCHEMA``.
DEPLOYMENT_COLUMNS = ("deployment", "gpus", "kv_pool_blocks")


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

    kind: str  # 'calibrated', 'shipped:FILE', 'measured' or 'roofline'
    model: str
    gpu: str
    seconds: Callable[[np.ndarray, np.ndarray], np.ndarray]  # one prefill's wall time
    run_id: str | None = None  # the replay or calibrate run that fitted it
    gpus: int = 1  # the GPUs one prefill busies for its ``seconds`` (the deployment's TP)


def savings_rows(
    outcomes: pl.DataFrame,
    traffic_s: float | None,
    cost: MissCost,
    gpu_hour: float | None = None,
) -> list[dict]:
    """Rows of SAVINGS_SCHEMA (without the configuration) for the fleet and each tenant:
    GPU-seconds are each prefill's time times ``cost.gpus``, the TTFTs its time alone, and
    dollars GPU-hours times ``gpu_hour`` (None: not priced).

    ``outcomes``: one row per request with ``tenant``, ``input_tokens``, ``hit_tokens``.
    """
    inp = outcomes["input_tokens"].to_numpy().astype(np.float64)
    hit = outcomes["hit_tokens"].to_numpy().astype(np.float64)
    new = np.maximum(inp - hit, 1.0)
    without = np.asarray(cost.seconds(inp, np.zeros_like(inp)), dtype=np.float64)
    with_cache = np.asarray(cost.seconds(new, inp - new), dtype=np.float64)
    rows = []
    for tenant, sel in named_groups(outcomes["tenant"].to_numpy()):
        if not sel.any():
            continue
        no = float(without[sel].sum()) * cost.gpus
        yes = float(with_cache[sel].sum()) * cost.gpus
        saved = no - yes
        per_hour = saved * 3600 / traffic_s if traffic_s else None
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
                "gpu_seconds_saved_per_hour": per_hour,
                "gpu_seconds_unit": GPU_SECONDS,
                "gpu_hour": gpu_hour,
                "usd_saved_per_hour": None
                if per_hour is None or gpu_hour is None
                else per_hour / 3600 * gpu_hour,
                "ttft_p50_no_cache_s": float(np.percentile(without[sel], 50)),
                "ttft_p95_no_cache_s": float(np.percentile(without[sel], 95)),
                "ttft_p50_with_cache_s": float(np.percentile(with_cache[sel], 50)),
                "ttft_p95_with_cache_s": float(np.percentile(with_cache[sel], 95)),
            }
        )
    return rows


def cost_model(
    model: str | ModelShape,
    gpu: str | GpuSpec | None,
    kind: str = "auto",
    calibrated: Fitted | None = None,
    config: str | None = None,
    tp: int = 1,
) -> MissCost:
    """The cost model that prices (model, gpu) on ``tp`` GPUs under ``--cost-model kind``
    (``choice.py``'s rule): ``calibrated`` (the run id that fitted it, or ``shipped:FILE``;
    coefficients; knees) where it is chosen, else the measured model, else the roofline.
    ``config``: a config.json whose shape ``model`` names (``resolve_model``); or ``model``
    the shape, resolved already."""
    shape = model if isinstance(model, ModelShape) else resolve_model(model, config)
    key, spec = gpu_key(gpu), device(gpu)
    which = chosen(kind, shape, spec, tp, calibrated)
    if which == "calibrated" and calibrated is not None:
        source, coefficients, knees = calibrated
        fitted = CostModel(tuple(float(c) for c in coefficients), knees)
        cost_kind, run_id = kind_of(source)
        return MissCost(cost_kind, shape.name, key, fitted.seconds, run_id, tp)
    assert spec is not None  # chosen: only a calibration prices the CPU
    if which == "measured":
        measured = measured_for(shape, spec, tp)
        return MissCost("measured", shape.name, spec.name, many(measured), gpus=tp)
    return MissCost(
        "roofline",
        shape.name,
        spec.name,
        lambda new, cached: np.asarray(prefill_cost(shape, spec, new, cached, tp=tp).seconds),
        gpus=tp,
    )


def gpu_key(gpu: str | GpuSpec | None) -> str:
    """How ``miss_cost_models.gpu`` names the device ``gpu`` stands for (a spec already
    resolved, a GPU file's included: its name; None: the CPU)."""
    if gpu is None:
        return "cpu"
    if isinstance(gpu, GpuSpec):
        return gpu.name
    return "cpu" if gpu.lower() == "cpu" else resolve_gpu(gpu).name


def savings_table(
    config: Configuration,
    outcomes: pl.DataFrame,
    traffic_s: float | None,
    cost: MissCost,
    deployment: dict | None = None,
    gpu_hour: float | None = None,
) -> pa.Table:
    """The ``savings`` rows of one configuration's outcomes; ``deployment``: the values of
    ``DEPLOYMENT_COLUMNS`` (None: all NULL); ``gpu_hour``: $ per GPU-hour (None: no dollars)."""
    hardware = {k: (deployment or {}).get(k) for k in DEPLOYMENT_COLUMNS}
    rows = [
        {
            "outcomes_run_id": config.run_id,
            "policy": config.policy,
            "isolation": config.isolation,
            "capacity_blocks": config.capacity_blocks,
            **row,
            **hardware,
        }
        for row in savings_rows(outcomes, traffic_s, cost, gpu_hour)
    ]
    return pa.Table.from_pylist(rows, schema=SAVINGS_SCHEMA)

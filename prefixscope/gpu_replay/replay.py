"""Replay: sample simulated requests, time each as a miss and as a hit on a real device, and
fit a prefill cost model (the ``replay`` stage stores samples and model).

Sampling is stratified so the fit sees the whole shape space a trace holds, not just its most
common request: strata are (input length by powers of two) × (hit share: none, up to half,
more than half), and requests are drawn from the strata in turn. Requests with a hit are
preferred (a hit with nothing cached is the miss again). A request longer than ``max_tokens``
is scaled down to it with its hit share kept; the trace's own figures stay beside the replayed
ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import polars as pl
import pyarrow as pa
import torch

from prefixscope.analysis.cost import costmodel
from prefixscope.analysis.cost.calibration import COST_MODEL_SCHEMA
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.gpu_replay.runner import Runner, RunnerOptions, ShapeResult
from prefixscope.gpu_replay.timing import device_spec

DEFAULT_MODELS = {"cpu": "tiny-llama", "cuda": "llama-3-8b"}
DEFAULT_MAX_TOKENS = {"cpu": 1024, "cuda": 32768}


@dataclass(frozen=True)
class ReplayOptions:
    device: str = "cpu"
    model: str | None = None  # default: DEFAULT_MODELS[device]
    model_config: str | None = None  # a config.json whose shape is replayed (``model`` names it)
    samples: int = 24
    max_tokens: int | None = None  # default: DEFAULT_MAX_TOKENS[device]
    #: the roofline's GPU, resolved where it was named; default: the CUDA device's
    #: datasheet, or peaks measured (CPU)
    gpu: GpuSpec | None = None
    dtype: str | None = None  # default: fp32 on the CPU, bf16 on CUDA
    chunk: int | None = None
    block_size: int = 16
    warmup: int = 1
    repeats: int = 5
    threads: int | None = 1  # CPU threads while timing: one core gives steady times
    holdout_share: float = 0.25
    seed: int = 0
    outcomes_run: str | None = None
    policy: str | None = None
    capacity_blocks: int | None = None
    isolation: str | None = None

    def resolved(self) -> ReplayOptions:
        kind = torch.device(self.device).type
        if kind not in DEFAULT_MODELS:
            raise ValueError(f"device {self.device!r}: cpu or cuda")
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: torch sees no CUDA device")
        return replace(
            self,
            model=self.model or (None if self.model_config else DEFAULT_MODELS[kind]),
            max_tokens=self.max_tokens or DEFAULT_MAX_TOKENS[kind],
            dtype=self.dtype or ("bf16" if kind == "cuda" else "fp32"),
        )


@dataclass(frozen=True)
class ReplayResult:
    samples: pa.Table
    cost_model_row: pa.Table  # its miss_cost_models row, without the run id
    model: costmodel.CostModel
    gpu: GpuSpec
    roofline_share: float


def stratified_sample(outcomes: pl.DataFrame, n: int, seed: int = 0) -> pl.DataFrame:
    """Up to ``n`` requests drawn from the strata in turn (random order within each)."""
    with_hits = outcomes.filter(pl.col("hit_tokens") > 0)
    pool = with_hits if with_hits.height else outcomes
    share = pl.col("hit_tokens") / pl.col("input_tokens")
    pool = pool.with_columns(
        stratum_len=pl.col("input_tokens").log(2).floor().cast(pl.Int64),
        stratum_hit=pl.when(share <= 0).then(0).when(share <= 0.5).then(1).otherwise(2),
    )
    rng = np.random.default_rng(seed)
    strata = [
        g.sample(fraction=1.0, shuffle=True, seed=int(rng.integers(2**31)))
        for _, g in pool.group_by(["stratum_len", "stratum_hit"], maintain_order=True)
    ]
    picked: list[pl.DataFrame] = []
    depth = 0
    while sum(p.height for p in picked) < n and any(depth < s.height for s in strata):
        picked += [s.slice(depth, 1) for s in strata if depth < s.height]
        depth += 1
    out = pl.concat(picked) if picked else pool.head(0)
    return out.head(n).drop("stratum_len", "stratum_hit")


def scale_to(input_tokens: int, hit_tokens: int, max_tokens: int) -> tuple[int, int]:
    """The shape replayed for a request: at most ``max_tokens`` tokens, hit share kept."""
    if input_tokens <= max_tokens:
        return input_tokens, hit_tokens
    return max_tokens, math.floor(hit_tokens * max_tokens / input_tokens)


def fit_points(results: list[ShapeResult], held_out: np.ndarray) -> costmodel.CostModel:
    """Each sample gives two points, its miss and its hit; a held-out sample holds out both."""
    new = [r.input_tokens for r in results] + [r.new_tokens for r in results]
    cached = [0] * len(results) + [r.cached_tokens for r in results]
    seconds = [r.miss_s for r in results] + [r.hit_s for r in results]
    return costmodel.fit_with_holdout(new, cached, seconds, np.concatenate([held_out, held_out]))


def replay_requests(
    outcomes: pl.DataFrame, outcomes_run_id: str, options: ReplayOptions
) -> ReplayResult:
    """Time sampled requests of ``outcomes`` (request id, tenant, input and hit tokens) as a
    miss and as a hit, and fit a cost model to the times; touches no warehouse."""
    o = options.resolved()
    assert o.max_tokens is not None and o.dtype is not None
    shape = resolve_model(o.model, o.model_config)
    picks = stratified_sample(outcomes, o.samples, o.seed)
    if picks.height < 2:
        raise ValueError("replay needs at least two requests in request_outcomes")
    shapes = [
        scale_to(i, h, o.max_tokens)
        for i, h in picks.select("input_tokens", "hit_tokens").iter_rows()
    ]
    threads = torch.get_num_threads()
    if o.threads and torch.device(o.device).type == "cpu":
        torch.set_num_threads(o.threads)
    try:
        runner = Runner(
            shape,
            GpuSpec("pending", 1.0, 1.0),
            max(i for i, _ in shapes),
            RunnerOptions(
                device=o.device,
                dtype=o.dtype,
                block_size=o.block_size,
                chunk=o.chunk,
                warmup=o.warmup,
                repeats=o.repeats,
                seed=o.seed,
            ),
        )
        spec = device_spec(runner.device, next(runner.model.parameters()).dtype, o.gpu)
        runner.gpu = spec
        results = [runner.run(i, h) for i, h in shapes]
    finally:
        torch.set_num_threads(threads)
    held = costmodel.holdout_mask(len(results), o.holdout_share, o.seed)
    model = fit_points(results, held)
    shares = [r.miss_roofline_s / r.miss_s for r in results]
    shares += [r.hit_roofline_s / r.hit_s for r in results]
    share = float(np.median(shares))
    device_name = (
        torch.cuda.get_device_name(runner.device) if runner.device.type == "cuda" else "cpu"
    )
    samples = pa.Table.from_pylist(
        [
            {
                "sample": k,
                "request_id": req["request_id"],
                "tenant": req["tenant"],
                "outcomes_run_id": outcomes_run_id,
                "model": shape.name,
                "device": device_name,
                "gpu": spec.name,
                "dtype": o.dtype,
                "block_size": o.block_size,
                "chunk": o.chunk,
                "request_input_tokens": req["input_tokens"],
                "request_hit_tokens": req["hit_tokens"],
                "input_tokens": r.input_tokens,
                "new_tokens": r.new_tokens,
                "cached_tokens": r.cached_tokens,
                "held_out": bool(held[k]),
                "miss_seconds": r.miss_s,
                "hit_seconds": r.hit_s,
                "miss_flops": r.miss_flops,
                "hit_flops": r.hit_flops,
                "miss_flops_per_s": r.miss_flops / r.miss_s,
                "hit_flops_per_s": r.hit_flops / r.hit_s,
                "miss_roofline_seconds": r.miss_roofline_s,
                "hit_roofline_seconds": r.hit_roofline_s,
                "repeats": o.repeats,
            }
            for k, (req, r) in enumerate(zip(picks.iter_rows(named=True), results, strict=True))
        ]
    )
    cost_row = cost_model_row(
        shape.name, device_name, spec.name, o.dtype, model, share, max(i for i, _ in shapes)
    )
    return ReplayResult(samples, cost_row, model, spec, share)


def cost_model_row(
    model_name: str,
    device: str,
    gpu: str,
    dtype: str,
    model: costmodel.CostModel,
    roofline_share: float | None,
    max_input_tokens: int,
) -> pa.Table:
    """The ``miss_cost_models`` row of a fitted model (without its run id)."""
    values = [
        model_name,
        device,
        gpu,
        dtype,
        costmodel.FORMULA,
        *model.coefficients,
        *model.knees,
        model.fit_samples,
        model.holdout_samples,
        model.holdout_median_pct_err,
        model.holdout_p90_pct_err,
        roofline_share,
        max_input_tokens,
    ]
    return pa.Table.from_pylist(
        [dict(zip(COST_MODEL_SCHEMA.names, values, strict=True))], schema=COST_MODEL_SCHEMA
    )

"""The miss-versus-hit benchmark: one command on a one-GPU machine, a table and a results file.

    python -m prefixscope.gpu_replay.bench                      # Llama-3-8B shapes, bf16, CUDA
    python -m prefixscope.gpu_replay.bench --device cpu --small # a seconds-long smoke run

Each shape (cached prefix L, new tokens t) runs as a miss (all L + t tokens) and as a hit (t
tokens against the L cached, through the block table; a CUDA graph on CUDA). It prints per
shape the median times, the achieved FLOP/s (analytic FLOPs / time) and the share of the
roofline reached, fits the prefill cost model on three shapes in four and reports its error on
the held-out fourth. Imports only torch, numpy and the standard library (and prefixscope
modules that import nothing else), so it runs where the warehouse's dependencies are absent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from prefixscope.analysis.cost import costmodel
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.gpu_replay.runner import DTYPES, Runner, RunnerOptions, ShapeResult
from prefixscope.gpu_replay.timing import device_spec

FULL_GRID = ((0, 512, 2048, 8192, 16384, 32768), (16, 64, 256, 1024, 4096))
SMALL_GRID = ((0, 64, 256), (16, 64))
#: The cost model must predict held-out shapes within this median error (percent).
TARGET_MEDIAN_PCT_ERR = 10.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prefixscope.gpu_replay.bench")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny model, tiny grid: a smoke run")
    p.add_argument("--model", help="catalog model (llama-3-8b; tiny-llama with --small)")
    p.add_argument("--gpu", help="roofline spec: h100, h200, a100 or NAME:TFLOPS:TBPS")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--cached", help="comma-separated cached prefixes (tokens)")
    p.add_argument("--new", help="comma-separated new-token counts")
    p.add_argument("--chunk", type=int, help="prefill at most this many tokens per forward")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--no-cuda-graphs", action="store_true")
    p.add_argument("--out", default="bench_miss_cost.json", help="full results (JSON)")
    return p.parse_args(argv)


def grid(args: argparse.Namespace) -> list[tuple[int, int]]:
    cached, new = SMALL_GRID if args.small else FULL_GRID
    if args.cached:
        cached = tuple(int(x) for x in args.cached.split(","))
    if args.new:
        new = tuple(int(x) for x in args.new.split(","))
    return [(c, n) for c in cached for n in new]


def table(results: Sequence[ShapeResult]) -> str:
    lines = [
        f"{'cached':>7} {'new':>6} {'miss ms':>9} {'hit ms':>9} {'miss/hit':>8} "
        f"{'miss TF/s':>9} {'hit TF/s':>8} {'miss roof':>9} {'hit roof':>8}"
    ]
    for r in results:
        lines.append(
            f"{r.cached_tokens:>7,} {r.new_tokens:>6,} {r.miss_s * 1e3:>9.3f} "
            f"{r.hit_s * 1e3:>9.3f} {r.miss_s / r.hit_s:>8.2f} "
            f"{r.miss_flops / r.miss_s / 1e12:>9.3g} {r.hit_flops / r.hit_s / 1e12:>8.3g} "
            f"{r.miss_roofline_s / r.miss_s:>9.0%} {r.hit_roofline_s / r.hit_s:>8.0%}"
        )
    return "\n".join(lines)


def fit_points(results: Sequence[ShapeResult]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One point per miss (distinct lengths) and per hit with something cached."""
    points: dict[tuple[int, int], list[float]] = {}
    for r in results:
        points.setdefault((r.input_tokens, 0), []).append(r.miss_s)
        if r.cached_tokens:
            points.setdefault((r.new_tokens, r.cached_tokens), []).append(r.hit_s)
    keys = sorted(points)
    return (
        np.array([k[0] for k in keys], dtype=np.float64),
        np.array([k[1] for k in keys], dtype=np.float64),
        np.array([float(np.median(points[k])) for k in keys]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu", file=sys.stderr)
        return 2
    if device.type == "cpu":
        torch.set_num_threads(1)  # steady times on a shared machine
    shape = resolve_model(args.model or ("tiny-llama" if args.small else "llama-3-8b"))
    dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    shapes = grid(args)
    options = RunnerOptions(
        device=str(device),
        dtype=dtype,
        chunk=args.chunk,
        cuda_graphs=not args.no_cuda_graphs,
        warmup=args.warmup,
        repeats=args.repeats,
    )
    started = time.perf_counter()
    spec = device_spec(device, DTYPES[dtype], args.gpu)
    runner = Runner(shape, spec, max(c + n for c, n in shapes), options)
    results = []
    for cached, new in shapes:
        results.append(runner.run(cached + new, cached))
        if device.type == "cuda":
            torch.cuda.empty_cache()  # each hit's CUDA graph keeps its own memory pool
    new_a, cached_a, secs = fit_points(results)
    held = costmodel.holdout_mask(len(secs), 0.25, seed=0)
    model = costmodel.fit_with_holdout(new_a, cached_a, secs, held)
    elapsed = time.perf_counter() - started

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = f"{spec.peak_flops / 1e12:,.1f} TFLOP/s, {spec.mem_bandwidth / 1e9:,.1f} GB/s"
    print(f"{shape.name} on {name}, {dtype}; roofline of {spec.name}: {peak}")
    print(table(results))
    ok = (model.holdout_median_pct_err or 0.0) <= TARGET_MEDIAN_PCT_ERR
    print(
        f"cost model {costmodel.FORMULA}, knees {model.knees}: held-out {model.holdout_samples}"
        f" points, median |error| {model.holdout_median_pct_err:.1f}%, p90"
        f" {model.holdout_p90_pct_err:.1f}% ({'within' if ok else 'above'} the"
        f" {TARGET_MEDIAN_PCT_ERR:.0f}% target); {elapsed:.1f} s"
    )
    out = {
        "model": asdict(shape),
        "device": name,
        "dtype": dtype,
        "gpu": asdict(spec),
        "torch": torch.__version__,
        "options": asdict(options),
        "results": [asdict(r) for r in results],
        "cost_model": {
            "formula": costmodel.FORMULA,
            "terms": list(costmodel.TERMS),
            **asdict(model),
            "held_out_points": [
                {"new": int(n), "cached": int(c), "seconds": float(s)}
                for n, c, s, h in zip(new_a, cached_a, secs, held, strict=True)
                if h
            ],
        },
        "seconds": elapsed,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

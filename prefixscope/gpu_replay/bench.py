"""The miss-versus-hit benchmark: one command on a one-GPU machine, a table and a results file.

    python -m prefixscope.gpu_replay.bench                      # Llama-3-8B shapes, bf16, CUDA
    python -m prefixscope.gpu_replay.bench --device cpu --small # a seconds-long smoke run
    python -m prefixscope.gpu_replay.bench --model llama-3.1-70b --layers 8   # 8 of 80 layers

Each shape (cached prefix L, new tokens t) runs as a miss (all L + t tokens) and as a hit (t
tokens against the L cached, through the block table; a CUDA graph on CUDA, and with
``--eager-hit`` the same hit without it). It prints per shape the median times, the achieved
FLOP/s (analytic FLOPs / time) and the share of the roofline reached, fits the prefill cost
model on three points in four and reports its error on the held-out fourth. ``--layers N``
times N of the model's layers and a zero-layer model and scales to the whole depth
(``depth.py``). ``--time-limit S`` skips the shapes predicted to end after S seconds
(``budget.py``); the results file is rewritten after every shape, so a run killed from outside
keeps what it measured. Imports only torch, numpy and the standard library (and prefixscope
modules that import nothing else), so it runs where the warehouse's dependencies are absent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from prefixscope.analysis.cost import costmodel
from prefixscope.analysis.cost.gpus import GpuSpec, resolve_gpu
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.analysis.cost.roofline import miss_and_hit
from prefixscope.gpu_replay import depth, summary
from prefixscope.gpu_replay.budget import Budget
from prefixscope.gpu_replay.provenance import provenance
from prefixscope.gpu_replay.runner import DTYPES, Runner, RunnerOptions, ShapeResult
from prefixscope.gpu_replay.timing import device_spec

FULL_GRID = ((0, 512, 2048, 8192, 16384, 32768), (16, 64, 256, 1024, 4096))
SMALL_GRID = ((0, 64, 256), (16, 64))


def _gpu(text: str) -> GpuSpec:
    """``--gpu``, resolved where parsed (a GPU file read here), as the command line's
    ``gpu_flags.gpu_spec`` does; not imported from there, whose flags need the warehouse's
    packages, which this benchmark's machine may not have."""
    try:
        return resolve_gpu(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prefixscope.gpu_replay.bench")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="tiny model, tiny grid: a smoke run")
    p.add_argument("--model", help="catalog model (llama-3-8b; tiny-llama with --small)")
    p.add_argument("--layers", type=int, help="time this many layers, scale to the whole model")
    p.add_argument(
        "--gpu",
        type=_gpu,
        help="roofline spec: h100, h200, a100, NAME:TFLOPS:TBPS or a GPU file (read once, here)",
    )
    p.add_argument("--dtype", choices=sorted(DTYPES), help="bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--cached", help="comma-separated cached prefixes (tokens)")
    p.add_argument("--new", help="comma-separated new-token counts")
    p.add_argument("--chunk", type=int, help="prefill at most this many tokens per forward")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--no-cuda-graphs", action="store_true")
    p.add_argument("--eager-hit", action="store_true", help="also time each hit without graph")
    p.add_argument("--time-limit", type=float, metavar="S", help="skip shapes past S seconds")
    p.add_argument("--out", default="bench_miss_cost.json", help="full results (JSON)")
    return p.parse_args(argv)


def grid(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(cached, new) pairs, smallest prefill first: a time limit cuts the largest."""
    cached, new = SMALL_GRID if args.small else FULL_GRID
    if args.cached:
        cached = tuple(int(x) for x in args.cached.split(","))
    if args.new:
        new = tuple(int(x) for x in args.new.split(","))
    return sorted(((c, n) for c in cached for n in new), key=lambda s: (s[0] + s[1], s[0]))


class Bench:
    """The runners of one benchmark: the model (or ``layers`` of it and a zero-layer head),
    one shape at a time, each result at the model's whole depth."""

    def __init__(
        self,
        shape: ModelShape,
        layers: int | None,
        max_tokens: int,
        options: RunnerOptions,
        gpu: GpuSpec | None,
    ) -> None:
        self.shape, self.layers = shape, layers
        device = torch.device(options.device)
        self.spec = device_spec(device, DTYPES[options.dtype], gpu)
        timed = shape if layers is None else depth.cut(shape, layers)
        self.runner = Runner(timed, self.spec, max_tokens, options)
        self.head = None if layers is None else Runner(
            depth.cut(shape, 0), self.spec, max_tokens, options
        )  # fmt: skip
        self.measured: dict[str, list[dict]] = {"layers": [], "head": []}

    def roofline_s(self, cached: int, new: int) -> float:
        """The roofline time of what runs for one shape (miss and hit)."""
        m, h = miss_and_hit(self.runner.shape, self.spec, cached + new, cached)
        return float(m.seconds) + float(h.seconds)

    def run(self, cached: int, new: int) -> ShapeResult:
        r = self.runner.run(cached + new, cached)
        if self.head is None or self.layers is None:
            return r
        h = self.head.run(cached + new, cached)
        self.measured["layers"].append(asdict(r))
        self.measured["head"].append(asdict(h))
        return depth.to_full_depth(self.shape, self.spec, self.layers, r, h)


def scaling_note(shape: ModelShape, layers: int | None) -> str | None:
    if layers is None:
        return None
    L = shape.num_hidden_layers  # noqa: N806
    return (
        f"timed {layers} of {L} layers (T_N) and the embedding and LM head alone (T_0); "
        f"whole model T = T_0 + {L}/{layers} x (T_N - T_0)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu", file=sys.stderr)
        return 2
    if device.type == "cpu":
        torch.set_num_threads(1)  # steady times on a shared machine
    budget = Budget(args.time_limit)
    shape = resolve_model(args.model or ("tiny-llama" if args.small else "llama-3-8b"))
    dtype = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    shapes = grid(args)
    options = RunnerOptions(
        device=str(device),
        dtype=dtype,
        chunk=args.chunk,
        cuda_graphs=not args.no_cuda_graphs,
        eager_hit=args.eager_hit,
        warmup=args.warmup,
        repeats=args.repeats,
    )
    bench = Bench(shape, args.layers, max(c + n for c, n in shapes), options, args.gpu)
    facts = provenance(device)
    out: dict[str, object] = {
        "schema": costmodel.BENCH_SCHEMA,
        "provenance": facts,
        "model": asdict(shape),
        "measured_layers": args.layers,
        "scaling": scaling_note(shape, args.layers),
        "device": facts["device_name"],
        "dtype": dtype,
        "gpu": asdict(bench.spec),
        "torch": torch.__version__,
        "options": asdict(options),
        "time_limit_s": args.time_limit,
        "grid": [{"cached": c, "new": n} for c, n in shapes],
        "results": [],
        "skipped": [],
        "complete": False,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    results: list[ShapeResult] = []
    for cached, new in shapes:
        roof = bench.roofline_s(cached, new)
        if not budget.allows(roof):
            out["skipped"].append({"cached": cached, "new": new})  # type: ignore[attr-defined]
            continue
        start = budget.elapsed()
        results.append(bench.run(cached, new))
        budget.record(budget.elapsed() - start, roof)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # each hit's CUDA graph keeps its own memory pool
        out.update(results=[asdict(r) for r in results], measured=bench.measured)
        out["seconds"] = budget.elapsed()
        path.write_text(json.dumps(out, indent=2))
    if len(results) < 2:
        print(f"only {len(results)} shapes ran within the time limit", file=sys.stderr)
        return 2
    cost = summary.fitted(results)
    out.update(cost_model=cost, summary=summary.figures(results), complete=True)
    out["seconds"] = budget.elapsed()
    path.write_text(json.dumps(out, indent=2))

    spec = bench.spec
    peak = f"{spec.peak_flops / 1e12:,.1f} TFLOP/s, {spec.mem_bandwidth / 1e9:,.1f} GB/s"
    print(f"{shape.name} on {facts['device_name']}, {dtype}; roofline of {spec.name}: {peak}")
    if out["scaling"]:
        print(f"scaled by layers: {out['scaling']}")
    print(summary.table(results))
    if out["skipped"]:
        print(f"skipped past the {args.time_limit:.0f} s limit: {out['skipped']}")
    print(summary.verdict(cost, budget.elapsed()))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

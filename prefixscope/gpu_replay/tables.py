"""The measured-kernel model's tables against the GPU at hand, kernel by kernel.

    python -m prefixscope.gpu_replay.tables --out tables.json             # on a CUDA GPU
    python -m prefixscope.gpu_replay.tables --device cpu --small --gpu h200 --out t.json

The measured model (``analysis/cost/measured.py``) prices a step from vLLM's kernels timed
elsewhere (``data/kernels/``). This times the same operations here and sets the table's time
over the time measured, per kind:

- ``gemm_bf16``, ``gemm_fp8``: ``x (m × k) · Wᵀ (n × k)`` at the projections of Llama-3-8B and
  Llama-3.1-70B at TP 1, m from 1 to 16,384 tokens (fp8: per-tensor scales, ``_scaled_mm``;
  the activation's quantisation is not timed; m from 16, its smallest tile);
- ``context``: causal attention over ``batch`` prefills of ``tokens`` (the two models' heads);
- ``generation``: ``batch`` decode tokens each over ``keys`` cached ones;
- ``chunk``: a chunk of ``new`` tokens after ``cached`` ones, the case no table holds. The model
  prices it as the whole prefill's time × the chunk's share of the query-key pairs, at least a
  decode over the whole context (``measured.py``). Here the chunk, the whole prefill and the
  decode are timed with one kernel and the rule applied to the two latter: its ratio to the
  chunk measured is the rule's own error, apart from how fast this kernel is.

Attention here is torch's own flash kernel (on a CPU, its reference path): not vLLM's (its
FlashAttention 3 on Hopper), so ``context`` and ``generation`` say how far the tables' kernels
are from torch's, and ``chunk`` is the rule's error (``ratio``: the rule over the measured
chunk; the tables' times over the measured elsewhere). Every figure is the median of its repeats
(``timing.py``). ``--time-limit S`` skips what is left after S seconds, and the results file
is written after every kind. Imports torch, numpy and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from prefixscope.analysis.cost import kernels as kernel_tables
from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.measured import attention_pairs
from prefixscope.analysis.cost.models import ModelShape, resolve_model
from prefixscope.gpu_replay.provenance import provenance
from prefixscope.gpu_replay.timing import measure

MODELS = ("llama-3-8b", "llama-3.1-70b")
FULL = {
    "models": MODELS,
    "m": (1, 4, 16, 64, 256, 1024, 4096, 16384),
    "context": ((1, 1024), (1, 4096), (1, 16384), (4, 1024), (4, 4096), (16, 1024)),
    "generation": ((1, 4096), (16, 4096), (64, 4096), (256, 4096), (16, 16384), (64, 1024)),
    "chunk": ((16, 4096), (16, 32768), (64, 4096), (64, 16384), (256, 1024), (256, 4096),
              (256, 16384), (512, 16384), (1024, 1024), (1024, 8192), (2048, 2048),
              (4096, 4096), (4096, 16384)),
}  # fmt: skip
SMALL = {
    "models": ("tiny-llama",),
    "m": (1, 16, 64),
    "context": ((1, 64), (2, 128)),
    "generation": ((1, 128), (4, 128)),
    "chunk": ((16, 64), (64, 64)),
}


def projections(shape: ModelShape) -> list[tuple[str, int, int]]:
    """(name, n, k) of one layer's linear layers at TP 1."""
    h, d = shape.hidden_size, shape.head_dim
    heads, kv = shape.num_attention_heads, shape.num_key_value_heads
    return [
        ("qkv", (heads + 2 * kv) * d, h),
        ("o", h, heads * d),
        ("gate_up", 2 * shape.intermediate_size, h),
        ("down", h, shape.intermediate_size),
    ]


def flash_takes_gqa(device: torch.device) -> bool:
    """Whether torch's flash kernel runs fewer KV heads than query heads as they are (else
    :func:`attend` repeats them to the query's heads, inside each timed call)."""
    q, k, v = (torch.randn(1, h, 128, 128, device=device, dtype=torch.bfloat16) for h in (4, 1, 1))
    try:
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal=True)
    except RuntimeError:
        return False
    return True


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, gqa: bool = True
) -> torch.Tensor:
    """Attention of ``q`` (b, heads, t, d) over ``k``, ``v`` (b, kv heads, s, d), causal to
    the lower right (the last query sees every key): flash on CUDA (``gqa``: it takes fewer KV
    heads as they are, :func:`flash_takes_gqa`), the reference elsewhere."""
    group = q.shape[1] // k.shape[1]
    if q.device.type == "cuda":
        if group > 1 and not gqa:
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        flash = torch.ops.aten._scaled_dot_product_flash_attention
        return flash(q, k, v, 0.0, is_causal=causal)[0]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    t, s = q.shape[2], k.shape[2]
    mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t) if causal else None
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


GRAPHED = 10  # calls per CUDA graph, for kernels short enough that a launch shows
SHORT_S = 5e-4


def graphed(fn: Callable[[], object]) -> Callable[[], object] | None:
    """``fn`` ``GRAPHED`` times over, as one CUDA graph (how the tables' kernels were timed,
    and how vLLM runs a decode step); None where it cannot be captured."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPHED):
                fn()
    except RuntimeError:
        return None
    return graph.replay


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """ms of ``fn``: the median of repeats enough to pass ~50 ms, after a warm-up; on CUDA a
    kernel under half a millisecond is timed inside a graph of ``GRAPHED`` calls, so that the
    launch and the events' own cost are not counted as the kernel's."""
    first = measure(fn, device, warmup=1, repeats=1).median_s
    per = 1
    if device.type == "cuda" and first < SHORT_S and (run := graphed(fn)) is not None:
        fn, per = run, GRAPHED
        first = measure(fn, device, warmup=1, repeats=1).median_s
    repeats = int(np.clip(0.05 / max(first, 1e-6), 3, 25))
    return measure(fn, device, warmup=1, repeats=repeats).median_s * 1e3 / per


def point(kind: str, table_ms: float, here_ms: float, **shape: object) -> dict[str, object]:
    return {"kind": kind, **shape, "table_ms": float(table_ms), "measured_ms": here_ms,
            "ratio": float(table_ms) / here_ms}  # fmt: skip


def gemms(tables, device, dtype, grid, fp8: bool) -> list[dict]:  # type: ignore[no-untyped-def]
    kind = "gemm_fp8" if fp8 else "gemm_bf16"
    out = []
    for model in grid["models"]:
        for name, n, k in projections(resolve_model(model)):
            w = torch.randn(n, k, device=device, dtype=dtype)
            for m in grid["m"]:
                if fp8 and m < 16:
                    continue
                x = torch.randn(m, k, device=device, dtype=dtype)
                if fp8:
                    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
                    one = torch.ones((), device=device)

                    def fn(x8=x8, w8=w8, one=one):  # type: ignore[no-untyped-def]
                        return torch._scaled_mm(x8, w8.t(), one, one, out_dtype=torch.bfloat16)
                else:

                    def fn(x=x, w=w):  # type: ignore[no-untyped-def]
                        return torch.nn.functional.linear(x, w)

                here = timed(fn, device)
                table = tables.gemm(m, n, k, "fp8" if fp8 else "bf16")
                out.append(point(kind, table, here, model=model, layer=name, m=m, n=n, k=k))
            del w
    return out


def heads_of(model: str) -> tuple[int, int, int]:
    s = resolve_model(model)
    return s.num_attention_heads, s.num_key_value_heads, s.head_dim


def qkv(b: int, heads: int, kv: int, d: int, t: int, s: int, device, dtype):  # type: ignore[no-untyped-def]
    q = torch.randn(b, heads, t, d, device=device, dtype=dtype)
    k = torch.randn(b, kv, s, d, device=device, dtype=dtype)
    return q, k, torch.randn_like(k)


def attentions(tables, device, dtype, grid, gqa) -> list[dict]:  # type: ignore[no-untyped-def]
    out = []
    for model in grid["models"]:
        heads, kv, d = heads_of(model)
        for b, s in grid["context"]:
            q, k, v = qkv(b, heads, kv, d, s, s, device, dtype)
            here = timed(lambda q=q, k=k, v=v: attend(q, k, v, True, gqa), device)
            table = tables.context(heads, kv, d, b, s)
            out.append(point("context", table, here, model=model, batch=b, tokens=s))
        for b, s in grid["generation"]:
            q, k, v = qkv(b, heads, kv, d, 1, s, device, dtype)
            here = timed(lambda q=q, k=k, v=v: attend(q, k, v, False, gqa), device)
            table = tables.generation(heads, kv, d, b, s)
            out.append(point("generation", table, here, model=model, batch=b, keys=s))
    return out


def chunks(tables, device, dtype, grid, gqa) -> list[dict]:  # type: ignore[no-untyped-def]
    """The chunk rule against this GPU: measured chunk ÷ measured whole prefill, beside the
    rule's (the table's whole prefill × the pairs' share, at least the table's decode)."""
    model = grid["models"][0]
    heads, kv, d = heads_of(model)
    out = []
    for new, cached in grid["chunk"]:
        whole = new + cached
        q, k, v = qkv(1, heads, kv, d, whole, whole, device, dtype)
        full_here = timed(lambda q=q, k=k, v=v: attend(q, k, v, True, gqa), device)
        qc = q[:, :, -new:].contiguous()
        chunk_here = timed(lambda qc=qc, k=k, v=v: attend(qc, k, v, True, gqa), device)
        qd = q[:, :, -1:].contiguous()
        decode_here = timed(lambda qd=qd, k=k, v=v: attend(qd, k, v, False, gqa), device)
        full_table = float(tables.context(heads, kv, d, 1, whole))
        share = float(attention_pairs(new, cached) / attention_pairs(whole, 0))
        rule = max(full_table * share, float(tables.generation(heads, kv, d, 1, whole)))
        rule_here = max(full_here * share, decode_here)
        out.append({
            "kind": "chunk", "model": model, "new": new, "cached": cached,
            "measured_ms": chunk_here, "measured_whole_ms": full_here,
            "measured_decode_ms": decode_here, "rule_here_ms": rule_here,
            "measured_share": chunk_here / full_here, "rule_share": rule / full_table,
            "pairs_share": share, "ratio": rule_here / chunk_here,
        })  # fmt: skip
        del q, k, v, qc, qd
    return out


def summarise(points: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Per kind: the ratio's median, min and max, and how many points."""
    out: dict[str, dict[str, float]] = {}
    for kind in dict.fromkeys(p["kind"] for p in points):
        r = np.array([p["ratio"] for p in points if p["kind"] == kind])
        out[kind] = {"points": int(r.size), "ratio_median": float(np.median(r)),
                     "ratio_min": float(r.min()), "ratio_max": float(r.max())}  # fmt: skip
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m prefixscope.gpu_replay.tables")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--gpu", help="whose tables (a100, h100, h200, b200); default: the device's")
    p.add_argument("--small", action="store_true", help="tiny shapes: a seconds-long smoke run")
    p.add_argument("--time-limit", type=float, default=240.0, metavar="S")
    p.add_argument("--out", default="tables_check.json")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    named = args.gpu or (torch.cuda.get_device_name(device) if device.type == "cuda" else "")
    gpu = resolve_gpu(named).name if named else ""
    tables = kernel_tables.load(gpu)
    if tables is None:
        print(f"no measured tables for {named or 'this device'}: known {kernel_tables.gpus()}")
        return 2
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    grid = SMALL if args.small else FULL
    fp8 = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)
    gqa = device.type != "cuda" or flash_takes_gqa(device)
    result: dict[str, object] = {
        "tables": {"gpu": tables.gpu, "vllm": tables.vllm},
        "device": provenance(device), "dtype": str(dtype).removeprefix("torch."),
        "points": [], "skipped": [],
        "flash_gqa": gqa if device.type == "cuda" else None,
    }  # fmt: skip
    parts = [("gemm_bf16", lambda: gemms(tables, device, dtype, grid, False))]
    if fp8:
        parts.append(("gemm_fp8", lambda: gemms(tables, device, dtype, grid, True)))
    parts += [("attention", lambda: attentions(tables, device, dtype, grid, gqa)),
              ("chunk", lambda: chunks(tables, device, dtype, grid, gqa))]  # fmt: skip
    t0, path = time.monotonic(), Path(args.out)
    for name, part in parts:
        if time.monotonic() - t0 > args.time_limit:
            result["skipped"].append(name)  # type: ignore[attr-defined]
            continue
        result["points"] += part()  # type: ignore[operator]
        result["summary"] = summarise(result["points"])  # type: ignore[arg-type]
        path.write_text(json.dumps(result, indent=1))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"{name}: done at {time.monotonic() - t0:.1f} s", flush=True)
    for kind, s in (result.get("summary") or {}).items():  # type: ignore[union-attr]
        print(f"{kind:12} {s['points']:3d} points: table / here median {s['ratio_median']:.2f}"
              f" (min {s['ratio_min']:.2f}, max {s['ratio_max']:.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

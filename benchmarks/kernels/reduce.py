"""Reduce aiconfigurator's measured vLLM kernel tables to the compact arrays prefixscope ships.

    python benchmarks/kernels/reduce.py --repo /path/to/aiconfigurator/.git [--commit SHA]

reads, with ``git show`` (the repository's parquet files, not a checkout), for each of A100,
H100, H200 and B200 (SXM), the tables of one vLLM version:

- ``gemm/vllm/V/gemm_perf.parquet``: one GEMM ``m × k`` by ``k × n`` (ms), per weight dtype;
- ``attention/vllm/V/{context,generation}_attention_perf.parquet``: flash attention of a
  prefill of ``isl`` tokens with no prefix, and of one decode token against ``step`` keys;
- ``mla/vllm/V/mla_{context,generation}_module_perf.parquet``: DeepSeek-V3's attention
  module (multi-head latent attention), per heads on a GPU;
- ``moe/vllm/V/moe_perf.parquet``: one fused MoE layer of ``num_tokens`` tokens;
- ``comm/vllm/V/custom_allreduce_perf.parquet``: vLLM's custom all-reduce (CUDA graph).

and writes ``prefixscope/data/kernels/<gpu>.npz`` (regular grids, ms, NaN where a point was not
measured) and ``PROVENANCE.json`` (repository, commit, files, vLLM versions, GPU names, the
license). The reduction keeps: bf16 KV and full attention (no window), one attention kernel per
GPU (vLLM's default for it), the fastest GEMM kernel per shape and dtype, a log-spaced subset of
``m``, MoE without expert parallelism and with the tables' skewed routing where measured
(``power_law_1.01``, else balanced). Nothing else of aiconfigurator is read or kept.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
from pathlib import Path

import numpy as np
import polars as pl

ROOT = "aic-core/src/aiconfigurator_core/systems/data"
LICENSE = "Apache-2.0"
REPOSITORY = "https://github.com/ai-dynamo/aiconfigurator"
#: GPU key in prefixscope's catalog → (aiconfigurator's folder, vLLM version of its tables).
GPUS = {
    "a100": ("a100_sxm", "0.14.0"),
    "h100": ("h100_sxm", "0.24.0"),
    "h200": ("h200_sxm", "0.24.0"),
    "b200": ("b200_sxm", "0.24.0"),
}
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
KEEP_M = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
          3072, 4096, 8192, 16384, 32768)  # fmt: skip
#: The attention kernel vLLM runs on each GPU by default (FlashAttention 3 on Hopper, the
#: FlashInfer TRT-LLM kernels on Blackwell, FlashAttention 2 on Ampere).
ATTENTION_KERNELS = {
    "a100_sxm": ("vllm_flash_attn", "vllm_flash_attn"),
    "h100_sxm": ("vllm_flash_attn_fa3", "vllm_flash_attn_fa3"),
    "h200_sxm": ("vllm_flash_attn_fa3", "vllm_flash_attn_fa3"),
    "b200_sxm": ("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"),
}
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "int4_wo": "int4",
              "w4a16_mxfp4": "mxfp4"}  # fmt: skip


def show(repo: Path, commit: str, path: str) -> bytes | None:
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def table(repo: Path, commit: str, path: str, used: list[str]) -> pl.DataFrame | None:
    raw = show(repo, commit, path)
    if raw is None:
        return None
    used.append(path)
    return pl.read_parquet(io.BytesIO(raw))


def skewed_routing(part: pl.DataFrame) -> tuple[str, pl.DataFrame]:
    """One MoE shape's rows at the tables' skewed routing where measured (``power_law_1.01``),
    else balanced."""
    dists = set(part["distribution"].to_list())
    pick = "power_law_1.01" if "power_law_1.01" in dists else "balanced"
    return pick, part.filter(pl.col("distribution") == pick)


def grid(frame: pl.DataFrame, axes: list[str], value: str = "latency") -> tuple:
    """A dense array over the sorted unique values of ``axes`` (the fastest row per point)."""
    frame = frame.group_by(axes).agg(pl.col(value).min())
    keys = [np.array(sorted(frame[a].unique().to_list())) for a in axes]
    out = np.full([len(k) for k in keys], np.nan, np.float32)
    index = tuple(np.searchsorted(k, frame[a].to_numpy()) for k, a in zip(keys, axes, strict=True))
    out[index] = frame[value].to_numpy()
    return keys, out


def reduce_gpu(repo: Path, commit: str, folder: str, version: str, used: list[str]) -> dict:
    base = f"{ROOT}/{folder}"
    arrays: dict[str, np.ndarray] = {}
    gemm = table(repo, commit, f"{base}/gemm/vllm/{version}/gemm_perf.parquet", used)
    assert gemm is not None, f"{folder} has no GEMM table for vLLM {version}"
    for theirs, ours in GEMM_DTYPES.items():
        part = gemm.filter((pl.col("gemm_dtype") == theirs) & pl.col("m").is_in(KEEP_M))
        if part.height:
            (m, n, k), ms = grid(part, ["m", "n", "k"])
            arrays |= {f"gemm_{ours}_m": m, f"gemm_{ours}_n": n, f"gemm_{ours}_k": k}
            arrays[f"gemm_{ours}_ms"] = ms
    ctx_kernel, gen_kernel = ATTENTION_KERNELS[folder]
    for kind, kernel, steps in (("context", ctx_kernel, "isl"), ("generation", gen_kernel, "step")):
        path = f"{base}/attention/vllm/{version}/{kind}_attention_perf.parquet"
        frame = table(repo, commit, path, used)
        assert frame is not None, f"{folder} has no {kind} attention table"
        if "window_size" in frame.columns:
            frame = frame.filter(pl.col("window_size") == 0)
        frame = frame.filter(
            (pl.col("kv_cache_dtype") == "bfloat16") & (pl.col("kernel_source") == kernel)
        )
        if kind == "generation":  # a decode at ``step`` reads step + 1 keys
            frame = frame.with_columns(kv=pl.col("step") + 1)
            steps = "kv"
        heads, cubes = [], []
        keys = None
        for (h, kv, d), part in sorted(
            frame.group_by(["num_heads", "num_key_value_heads", "head_dim"]),
            key=lambda x: x[0],
        ):
            (b, s), ms = grid(part, ["batch_size", steps])
            if keys is None:
                keys = (b, s)
            full = np.full((len(keys[0]), len(keys[1])), np.nan, np.float32)
            ib, is_ = np.searchsorted(keys[0], b), np.searchsorted(keys[1], s)
            ok_b, ok_s = np.isin(b, keys[0]), np.isin(s, keys[1])
            full[np.ix_(ib[ok_b], is_[ok_s])] = ms[np.ix_(ok_b, ok_s)]
            heads.append((h, kv, d))
            cubes.append(full)
        short = "ctx" if kind == "context" else "gen"
        arrays[f"{short}_heads"] = np.array(heads, np.int32)
        arrays[f"{short}_b"], arrays[f"{short}_s"] = keys
        arrays[f"{short}_ms"] = np.stack(cubes)
    for kind in ("context", "generation"):
        path = f"{base}/mla/vllm/{version}/mla_{kind}_module_perf.parquet"
        frame = table(repo, commit, path, used)
        if frame is None:
            continue
        frame = frame.filter(
            (pl.col("kv_cache_dtype") == "bfloat16") & (pl.col("gemm_type") == "fp8_block")
        )
        steps = "isl" if kind == "context" else "kv"
        if kind == "generation":
            frame = frame.with_columns(kv=pl.col("step") + 1)
        (h, b, s), ms = grid(frame, ["num_heads", "batch_size", steps])
        short = "mla_ctx" if kind == "context" else "mla_gen"
        arrays |= {f"{short}_h": h, f"{short}_b": b, f"{short}_s": s, f"{short}_ms": ms}
    moe = table(repo, commit, f"{base}/moe/vllm/{version}/moe_perf.parquet", used)
    if moe is not None:
        moe = moe.filter(pl.col("moe_ep_size") == 1)
        shapes = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"]
        keys_out, curves = [], []
        tokens = np.array(sorted(moe["num_tokens"].unique().to_list()))
        for key, part in sorted(moe.group_by(shapes), key=lambda x: str(x[0])):
            if key[0] not in MOE_DTYPES:
                continue
            _, part = skewed_routing(part)
            if not part.height:
                continue
            (t,), ms = grid(part, ["num_tokens"])
            curve = np.full(len(tokens), np.nan, np.float32)
            curve[np.searchsorted(tokens, t)] = ms
            dtype_code = list(MOE_DTYPES).index(key[0])
            keys_out.append((dtype_code, *key[1:]))
            curves.append(curve)
        arrays["moe_keys"] = np.array(keys_out, np.int32)
        arrays["moe_tokens"] = tokens
        arrays["moe_ms"] = np.stack(curves)
    comm = table(repo, commit, f"{base}/comm/vllm/{version}/custom_allreduce_perf.parquet", used)
    if comm is not None:
        comm = comm.filter(pl.col("kernel_source") == "vLLM_custom_graph")
        (g, size), ms = grid(comm, ["num_gpus", "message_size"])
        arrays |= {"ar_gpus": g, "ar_elements": size, "ar_ms": ms}
    return arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="aiconfigurator's git directory")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", type=Path, default=Path("prefixscope/data/kernels"))
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", f"--git-dir={args.repo}", "rev-parse", args.commit],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    provenance: dict = {
        "repository": REPOSITORY,
        "commit": commit,
        "license": LICENSE,
        "moe_dtypes": list(MOE_DTYPES.values()),
        "gpus": {},
    }
    for ours, (folder, version) in GPUS.items():
        used: list[str] = []
        arrays = reduce_gpu(args.repo, commit, folder, version, used)
        # ms to three significant digits (float16): the tables' own run-to-run spread is larger
        small = {k: v.astype(np.float16) if k.endswith("_ms") else v for k, v in arrays.items()}
        np.savez_compressed(args.out / f"{ours}.npz", **small)
        provenance["gpus"][ours] = {"folder": folder, "vllm": version, "files": used}
        size = (args.out / f"{ours}.npz").stat().st_size
        print(f"{ours}: {len(used)} tables, {size / 1024:.0f} KiB")
    (args.out / "PROVENANCE.json").write_text(json.dumps(provenance, indent=1) + "\n")


if __name__ == "__main__":
    main()

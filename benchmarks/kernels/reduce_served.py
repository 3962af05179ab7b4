"""The fused-MoE curves of the kernels some real serving runs were launched with, where they
differ from the one ``reduce.py`` keeps for their GPU.

    python benchmarks/kernels/reduce_served.py --repo /path/to/aiconfigurator/.git [--commit SHA]

``benchmarks/measured_error.py`` prices each run with the settings its launch script set
(``benchmarks/data/served.csv``). Two of those scripts chose an MoE kernel other than the one
the package's tables hold for the GPU:

- ``mxfp8-activations``: gpt-oss-120b on B200 with ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``,
  FlashInfer's TRT-LLM kernel with MXFP4 weights and MXFP8 activations. vLLM's own table holds
  that kernel only at other expert shapes; SGLang's 0.5.14 table times the same FlashInfer
  kernel at gpt-oss's (its ``w4a16`` rows equal vLLM's within 2%, ``benchmarks/RESULTS.md``).
- ``triton-ep``: MiniMax-M2.5 on B200 with FlashInfer and DeepGEMM switched off
  (``VLLM_USE_FLASHINFER_MOE_FP8=0``, ``VLLM_MOE_USE_DEEP_GEMM=0``): vLLM's Triton
  ``fused_experts``, as vLLM 0.19.0's table times it, with expert parallelism over the TP group
  (the script enabled it for every run).

Writes ``benchmarks/data/moe_served.json``: per kernel and MoE shape, ms over tokens (the
tables' ``power_law_1.01`` routing where measured, else balanced, as ``reduce.py`` keeps).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import polars as pl
from reduce import ROOT, show, skewed_routing

#: kernel name → (table, moe_dtype, hidden, inter, topk, experts, [(moe_tp, moe_ep), ...])
CURVES = {
    "mxfp8-activations": (
        "b200_sxm/moe/sglang/0.5.14/moe_perf.parquet", "w4a8_mxfp4_mxfp8",
        2880, 2880, 4, 128, [(1, 1), (2, 1), (4, 1), (8, 1)],
    ),
    "triton-ep": (
        "b200_sxm/moe/vllm/0.19.0/moe_perf.parquet", "fp8_block",
        3072, 1536, 8, 256, [(1, 2), (1, 4)],
    ),
}  # fmt: skip
OUT = Path("benchmarks/data/moe_served.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="aiconfigurator's git directory")
    parser.add_argument("--commit", default="HEAD")
    args = parser.parse_args()

    commit = subprocess.run(
        ["git", f"--git-dir={args.repo}", "rev-parse", args.commit],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    curves = []
    for name, (path, dtype, hidden, inter, topk, experts, groups) in CURVES.items():
        raw = show(args.repo, commit, f"{ROOT}/{path}")
        assert raw is not None, f"{path} is not at {commit}"
        frame = pl.read_parquet(raw)
        for tp, ep in groups:
            part = frame.filter(
                (pl.col("moe_dtype") == dtype) & (pl.col("hidden_size") == hidden)
                & (pl.col("inter_size") == inter) & (pl.col("topk") == topk)
                & (pl.col("num_experts") == experts) & (pl.col("moe_tp_size") == tp)
                & (pl.col("moe_ep_size") == ep)
            )  # fmt: skip
            pick, part = skewed_routing(part)
            assert part.height, f"{path}: no {dtype} rows at tp {tp}, ep {ep}"
            points = part.group_by("num_tokens").agg(pl.col("latency").min()).sort("num_tokens")
            curves.append({
                "kernel": name, "hidden": hidden, "inter": inter, "topk": topk,
                "experts": experts, "moe_tp": tp, "moe_ep": ep,
                "source": path, "moe_dtype": dtype, "distribution": pick,
                "kernel_source": sorted(set(part["kernel_source"].to_list())),
                "tokens": points["num_tokens"].to_list(),
                "ms": [round(float(v), 5) for v in points["latency"]],
            })  # fmt: skip
    OUT.write_text(json.dumps({
        "repository": "https://github.com/ai-dynamo/aiconfigurator", "commit": commit,
        "license": "Apache-2.0", "root": ROOT, "curves": curves,
    }, indent=1) + "\n")  # fmt: skip
    print(f"wrote {OUT}: {len(curves)} curves, {OUT.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()

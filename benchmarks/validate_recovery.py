"""Benchmark: does ``prefixscope validate`` recover the capacity an engine really had?

Generated gateway logs (``prefixscope.synthetic_gateway``: three tenants of conversations,
blocks of 16 tokens) carry the cached tokens that a plain-Python LRU engine cache of a known
size reported. Each engine is one row: HBM blocks, whether the running requests' KV takes its
share of them, and the share of reports garbled. The log is ingested and validated by the
command, as a user would; the table gives the effective capacity found, its 95% range, whether
it meets the truth, and the agreement at that capacity. With ``running``, the truth is a
capacity that moves request by request: the row gives its median and its middle 80%, and "in
range" says whether that band meets the 95% range.

    .venv/bin/python benchmarks/validate_recovery.py      # about a minute
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

from prefixscope.cli import main
from prefixscope.synthetic_gateway import Draft, EngineCache, GatewayWorkload

WORKLOAD = GatewayWorkload(sessions=300, mean_gap_s=120.0)
ENGINES = (
    EngineCache(hbm_blocks=600),
    EngineCache(hbm_blocks=2_000),
    EngineCache(hbm_blocks=6_000),
    EngineCache(hbm_blocks=2_000, noise_share=0.05),
    EngineCache(hbm_blocks=4_000, running=True),
)


def main_() -> None:
    draft = Draft.build(WORKLOAD, seed=11)
    trace = draft.trace
    print(
        f"log: {trace.n_requests:,} requests, {trace.n_unique:,} distinct blocks of "
        f"{trace.block_size} tokens, {WORKLOAD.sessions} sessions"
    )
    print(
        "| engine | truth (blocks) | effective capacity | 95% range | in range | exact match "
        "| mean abs error (tokens) | correlation | validate (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, engine in enumerate(ENGINES):
        with tempfile.TemporaryDirectory() as tmp:
            log = draft.write(Path(tmp) / "gateway.jsonl", engine, seed=k)
            wh = str(Path(tmp) / "wh.duckdb")
            ingest = ["ingest", "--format", "openai", "--tenant-field", "user"]
            with contextlib.redirect_stdout(io.StringIO()):  # the table alone
                assert main([*ingest, "--input", str(log.path), "--warehouse", wh]) == 0
                start = time.perf_counter()
                assert main(["validate", "--warehouse", wh, "--top", "0"]) == 0
                took = time.perf_counter() - start
            with duckdb.connect(wh, read_only=True) as con:
                row = con.execute(
                    "SELECT capacity_blocks, capacity_low_blocks, capacity_high_blocks, "
                    "exact_match_share, mean_abs_error_tokens, correlation "
                    "FROM latest_validation WHERE tenant = '*'"
                ).fetchall()[0]
        cap, low, high, exact, mae, corr = row
        truth = np.asarray(log.capacities)
        lo_t, mid_t, hi_t = np.percentile(truth, [10, 50, 90]).astype(int)
        told = f"{mid_t:,}" if lo_t == hi_t else f"{mid_t:,} ({lo_t:,}–{hi_t:,})"
        inside = low <= hi_t and (high is None or lo_t <= high)  # the ranges meet
        name = f"{engine.hbm_blocks:,} HBM blocks"
        name += ", less running requests" if engine.running else ""
        name += f", {engine.noise_share:.0%} garbled" if engine.noise_share else ""
        span = f"{low:,}–{'∞' if high is None else f'{high:,}'}"
        print(
            f"| {name} | {told} | {cap:,} | {span} | {'yes' if inside else 'no'} | "
            f"{exact:.3f} | {mae:.1f} | {corr:.4f} | {took:.1f} |"
        )


if __name__ == "__main__":
    main_()

"""Benchmark: ``prefixscope validate`` on each API's usage layout.

One generated gateway log (``prefixscope.synthetic_gateway``) whose cached-token reports come
from a plain-Python LRU engine cache of a known size, written in each layout
(:data:`~prefixscope.synthetic_gateway.LAYOUTS`: OpenAI Chat, the Responses API, Anthropic's
Messages API with its exclusive ``input_tokens``, OTLP GenAI spans), then ingested and
validated by the commands, as a user would. Every layout must give the same requests, the same
reports and the same effective capacity: the table shows it.

    .venv/bin/python benchmarks/validate_layouts.py      # about half a minute
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import duckdb

from prefixscope.cli import main
from prefixscope.synthetic_gateway import LAYOUTS, Draft, EngineCache, GatewayWorkload

WORKLOAD = GatewayWorkload(sessions=300, mean_gap_s=120.0)
ENGINE = EngineCache(hbm_blocks=2_000)


def main_() -> None:
    draft = Draft.build(WORKLOAD, seed=11)
    trace = draft.trace
    print(
        f"log: {trace.n_requests:,} requests, {trace.n_unique:,} distinct blocks of "
        f"{trace.block_size} tokens; engine: LRU of {ENGINE.hbm_blocks:,} blocks"
    )
    print(
        "| layout | accepted | reported cached tokens | reported prompt tokens "
        "| effective capacity | 95% range | exact match | mean abs error (tokens) "
        "| ingest (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for layout in LAYOUTS:
        with tempfile.TemporaryDirectory() as tmp:
            log = draft.write(Path(tmp) / "log.jsonl", ENGINE, seed=0, layout=layout)
            wh = str(Path(tmp) / "wh.duckdb")
            fmt = "otlp" if layout == "otlp" else "openai"
            ingest = ["ingest", "--format", fmt, "--tenant-field", "user"]
            with contextlib.redirect_stdout(io.StringIO()):  # the table alone
                start = time.perf_counter()
                assert main([*ingest, "--input", str(log.path), "--warehouse", wh]) == 0
                took = time.perf_counter() - start
                assert main(["validate", "--warehouse", wh, "--top", "0"]) == 0
            with duckdb.connect(wh, read_only=True) as con:
                accepted, cached, prompt = con.execute(
                    "SELECT count(*), sum(reported_cached_tokens), sum(reported_prompt_tokens) "
                    "FROM requests"
                ).fetchone()  # type: ignore[misc]
                cap, low, high, exact, mae = con.execute(
                    "SELECT capacity_blocks, capacity_low_blocks, capacity_high_blocks, "
                    "exact_match_share, mean_abs_error_tokens "
                    "FROM latest_validation WHERE tenant = '*'"
                ).fetchall()[0]
            if layout == "anthropic":
                naive = naive_anthropic(log.path)
        assert cached == int(log.reported.sum()), (layout, cached)
        span = f"{low:,}–{'∞' if high is None else f'{high:,}'}"
        print(
            f"| {layout} | {accepted:,} | {cached:,} | {prompt:,} | {cap:,} | {span} | "
            f"{exact:.3f} | {mae:.1f} | {took:.2f} |"
        )
    print(
        f"Anthropic's input_tokens read as the whole prompt (the naive reading): prompts of "
        f"{naive[0]:,} tokens in all, and {naive[1]:,} of {trace.n_requests:,} reports above "
        "their prompt."
    )


def naive_anthropic(path: Path) -> tuple[int, int]:
    """Anthropic's ``input_tokens`` taken for the prompt, as OpenAI's ``prompt_tokens`` would
    be: its total, and how many reports it puts above their prompt."""
    total = beyond = 0
    for text in path.read_text().splitlines():
        usage = json.loads(text)["response"]["usage"]
        total += usage["input_tokens"]
        beyond += usage["cache_read_input_tokens"] > usage["input_tokens"]
    return total, beyond


if __name__ == "__main__":
    main_()

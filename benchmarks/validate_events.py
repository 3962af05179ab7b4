"""Benchmark: does ``prefixscope validate --events`` recover the size of an engine's block pool?

A generated log of conversations (``prefixscope.synthetic_events``: shared system prompts,
turns that re-send the history, 16-token blocks) is served by an engine written on its own in
that module, as vLLM v1's block pool runs (free queue, tail first, running requests pinned),
with a pool of a known size; its KV cache events are written as ``capture-events`` writes them,
in vLLM's wire format. The log and the events are ingested and validated by the commands, as a
user would. Each row: the engine (pool sizes per rank, the spread of its true service times
around the model's), the capacity found per rank, and the agreement there.

``sigma`` is the lognormal sigma of a per-request factor on the engine's true service time;
the simulator knows only the nominal model (``--tpot-ms 20``, ``--prefill-tokens-per-s
10000``), so with sigma > 0 it frees a request's blocks a little earlier or later than the
engine did, and the blocks near the eviction frontier differ.

    .venv/bin/python benchmarks/validate_events.py      # a few minutes on a loaded 2-core box
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from prefixscope import synthetic_events as se
from prefixscope.cli import main

WORKLOAD = se.Workload(requests=1_500)


@dataclass(frozen=True)
class Case:
    capacities: tuple[int, ...]  # one pool per rank
    sigma: float = 0.0
    encoding: str = "map"
    model: str = "vllm"


CASES = (
    Case((2_000,)),
    Case((2_000,), sigma=0.1),
    Case((2_000,), sigma=0.3),
    Case((2_000,), model="lru"),
    Case((1_200, 2_000), encoding="array"),
)


def run_case(case: Case, folder: Path) -> list[tuple]:
    log = se.make_log(WORKLOAD)
    parts = (
        [log]
        if len(case.capacities) == 1
        else se.split_by_session(log, len(case.capacities), WORKLOAD.block_size)
    )
    runs = [
        se.run_engine(
            part,
            se.Engine(capacity_blocks=c, jitter_sigma=case.sigma, encoding=case.encoding),
            WORKLOAD.block_size,
        )
        for part, c in zip(parts, case.capacities, strict=True)
    ]
    se.write_log(log, folder / "log.jsonl")
    se.write_capture(runs, folder / "events.bin", case.encoding)
    wh = folder / "wh.duckdb"
    with contextlib.redirect_stdout(io.StringIO()):
        ingest = ["ingest", "--warehouse", str(wh), "--input"]
        assert main([*ingest, str(folder / "log.jsonl"), "--format", "tokens",
                     "--output-tokens-field", "output_tokens"]) == 0  # fmt: skip
        assert main([*ingest, str(folder / "events.bin"), "--format", "vllm-events"]) == 0
        assert main(["validate", "--events", "--pool-model", case.model, "--warehouse",
                     str(wh)]) == 0  # fmt: skip
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(
            """SELECT rank, capacity_blocks, engine_held_share, sim_held_share, jaccard,
                      removal_match_share, kendall_tau, engine_removals,
                      (SELECT count(*) FROM validation_events v2 WHERE v2.rank = v.rank)
               FROM validation_events v WHERE best ORDER BY rank"""
        ).fetchall()


def main_() -> None:
    print(
        "| engine pool(s) | sigma | encoding | model | rank | found | engine held in pool "
        "| pool held in engine | jaccard | removals matched | Kendall tau | removals | scanned |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            rows = run_case(case, Path(tmp))
            took = time.perf_counter() - start
        for rank, found, eng, sim, jac, match, tau, removals, scanned in rows:
            print(
                f"| {' + '.join(f'{c:,}' for c in case.capacities)} | {case.sigma} "
                f"| {case.encoding} | {case.model} | {rank} | {found:,} | {100 * eng:.1f}% "
                f"| {100 * sim:.1f}% | {jac:.3f} | {100 * match:.1f}% | {tau:.3f} "
                f"| {removals:,} | {scanned} |"
            )
        print(f"<!-- {took:.0f} s -->")


if __name__ == "__main__":
    main_()

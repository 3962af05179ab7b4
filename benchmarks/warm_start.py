"""Benchmark: what a warm start changes (``simulate`` and ``fleet --warm-start``).

An engine (``prefixscope.synthetic_events``: vLLM v1's block pool written on its own) serves a
generated log of conversations with a pool of 3,000 blocks; its KV events are captured from the
start, and the warehouse holds the second half of the log with every event, as an operator who
starts capturing requests while the engine is already warm would have it. Each row: one start
(cold; the trace's own first minute; the engine's cache from its events), the first 30-second
bucket's token hit rate, the whole trace's, and the steady window's with its 95% interval and
where it starts, for one LRU cache of the engine's size and for two kv-aware replicas of half.

    .venv/bin/python benchmarks/warm_start.py      # about half a minute here
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

import duckdb

from prefixscope import synthetic_events as se
from prefixscope.analysis.trace.warm import parse_warm_start
from prefixscope.cli import main

WORKLOAD = se.Workload(requests=1_200, rate_per_s=4.0)
CAPACITY = 3_000
STARTS = ("cold", "first-window:60", "events")


def quiet(*argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(list(argv)) == 0, argv


def warehouse(tmp: Path) -> Path:
    log = se.make_log(WORKLOAD)
    engine = se.Engine(capacity_blocks=CAPACITY, jitter_sigma=0.0)
    run = se.run_engine(log, engine, WORKLOAD.block_size)
    se.write_log(log[len(log) // 2 :], tmp / "log.jsonl")
    se.write_capture([run], tmp / "events.bin", "map")
    wh = tmp / "wh.duckdb"
    quiet("ingest", "--format", "tokens", "--input", str(tmp / "log.jsonl"),
          "--output-tokens-field", "output_tokens", "--warehouse", str(wh))  # fmt: skip
    quiet("ingest", "--format", "vllm-events", "--input", str(tmp / "events.bin"),
          "--warehouse", str(wh))  # fmt: skip
    return wh


def main_() -> None:
    with tempfile.TemporaryDirectory() as d:
        wh = str(warehouse(Path(d)))
        print(f"{'what':<8} {'start':<16} {'warm-up':>8} {'first 30 s':>10} {'all':>7} "
              f"{'steady (95% CI, from request)':>34}")  # fmt: skip
        for start in STARTS:
            quiet("simulate", "--warehouse", wh, "--policy", "lru", "--capacity-blocks",
                  str(CAPACITY), "--window", "all,steady", "--bucket", "30s",
                  "--warm-start", start)  # fmt: skip
            quiet("fleet", "--warehouse", wh, "--router", "kv-aware", "--replicas", "2",
                  "--capacity-blocks", str(CAPACITY // 2), "--window", "all,steady",
                  "--warm-start", start)  # fmt: skip
        with duckdb.connect(wh, read_only=True) as con:
            for start in STARTS:
                rows = con.execute(
                    """SELECT h.measure_window, h.token_hit_rate, h.ci_low, h.ci_high,
                              h.warmup_requests, h.warm_requests,
                              (SELECT t.token_hit_rate FROM hit_rate_timeseries t
                               WHERE t.run_id = h.run_id AND t.tenant = '*'
                               ORDER BY t.bucket_start LIMIT 1)
                       FROM hit_rates h WHERE h.tenant = '*' AND h.warm_start = ?
                       ORDER BY h.measure_window""",
                    [parse_warm_start(start).label],
                ).fetchall()
                (_, rate, _, _, _, warm, first), (_, steady, lo, hi, since, _, _) = rows
                print(f"{'lru':<8} {start:<16} {warm:>8,} {first:>10.4f} {rate:>7.4f} "
                      f"{steady:>8.4f} ({lo:.4f}–{hi:.4f}, {since:>4,})")  # fmt: skip
            for start in STARTS:
                rows = con.execute(
                    """SELECT measure_window, token_hit_rate, warm_requests, warmup_requests
                       FROM fleet_hit_rates WHERE tenant = '*' AND warm_start = ?
                       ORDER BY measure_window""",
                    [parse_warm_start(start).label],
                ).fetchall()
                (_, rate, warm, _), (_, steady, _, since) = rows
                print(f"{'kv-aware':<8} {start:<16} {warm:>8,} {'':>10} {rate:>7.4f} "
                      f"{steady:>8.4f} (from request {since:,})")  # fmt: skip


if __name__ == "__main__":
    main_()

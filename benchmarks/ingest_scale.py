"""Benchmark: ingest at scale. Generates its own Mooncake-format data, then prints

1. one file of 1M requests (~24 blocks each): the time `polars.read_ndjson` takes to just read
   it, the time `prefixscope ingest` takes to read, validate and store it, their ratio, and the
   ingest's peak memory (each in its own process, so peaks do not mix);
2. a day of hourly logs (24 files) in one command, then the same command again: the row count
   must not change.

    make bench        # or: .venv/bin/python benchmarks/ingest_scale.py [--requests N]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

BIN = Path(sys.executable).parent


def write_trace(path: Path, n: int, seed: int, first_ts: int = 0) -> None:
    """Mooncake lines: ~24 blocks of 512 tokens each, a shared prefix of up to 8 blocks."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(12, 37, size=n)
    shared = np.minimum(rng.integers(0, 9, size=n), blocks)
    tail = blocks * 512 - rng.integers(0, 512, size=n)
    out = rng.integers(1, 900, size=n)
    next_id = 10_000 + seed * 10**9
    with path.open("w") as f:
        for i in range(n):
            ids = list(range(int(shared[i])))
            fresh = int(blocks[i] - shared[i])
            ids += range(next_id, next_id + fresh)
            next_id += fresh
            f.write(
                json.dumps(
                    {
                        "timestamp": first_ts + i * 3,
                        "input_length": int(tail[i]),
                        "output_length": int(out[i]),
                        "hash_ids": ids,
                    }
                )
                + "\n"
            )


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (GiB) and stdout of ``cmd`` run in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the max over all children so far: run the big one first.
    return wall, max(peak, before) / 2**20, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--hourly-files", type=int, default=24)
    parser.add_argument("--requests-per-file", type=int, default=20_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        big = tmpdir / "big.jsonl"
        write_trace(big, args.requests, seed=1)
        size_mb = big.stat().st_size / 1e6

        wall_ingest, peak_ingest, _ = timed(
            [
                str(BIN / "prefixscope"),
                "ingest",
                "--format",
                "mooncake",
                "--input",
                str(big),
                "--warehouse",
                str(tmpdir / "big.duckdb"),
            ]
        )
        read = (
            "import time, polars as pl, sys; t = time.perf_counter(); "
            f"df = pl.read_ndjson({str(big)!r}); print(time.perf_counter() - t, df.height)"
        )
        _, peak_polars, out = timed([sys.executable, "-c", read])
        wall_polars = float(out.split()[0])
        wall_polars_proc, _, _ = timed([sys.executable, "-c", read])
        print(f"1 file, {args.requests:,} requests, {size_mb:,.0f} MB")
        print(f"  polars.read_ndjson (read only):   {wall_polars:6.2f} s")
        print(
            f"  prefixscope ingest (whole command, process start to exit): "
            f"{wall_ingest:6.2f} s, peak RSS {peak_ingest:.2f} GiB"
        )
        print(
            f"  ratio ingest / polars read:       {wall_ingest / wall_polars:6.2f}x"
            f"   (polars in its own process, start to exit: {wall_polars_proc:.2f} s)"
        )

        files = []
        for h in range(args.hourly_files):
            f = tmpdir / f"hour{h:02d}.jsonl"
            write_trace(f, args.requests_per_file, seed=100 + h, first_ts=h * 3_600_000)
            files.append(str(f))
        day = tmpdir / "day.duckdb"
        cmd = [
            str(BIN / "prefixscope"),
            "ingest",
            "--format",
            "mooncake",
            "--input",
            *files,
            "--warehouse",
            str(day),
        ]
        first, _, _ = timed(cmd)
        rows_first = (
            duckdb.connect(str(day), read_only=True)
            .execute("SELECT count(*) FROM requests")
            .fetchone()[0]
        )
        again, _, _ = timed(cmd)
        rows_again = (
            duckdb.connect(str(day), read_only=True)
            .execute("SELECT count(*) FROM requests")
            .fetchone()[0]
        )
        print(
            f"{len(files)} hourly files x {args.requests_per_file:,} requests in one command: "
            f"{first:.2f} s, {rows_first:,} rows; same command again: {again:.2f} s, "
            f"{rows_again:,} rows"
        )


if __name__ == "__main__":
    main()

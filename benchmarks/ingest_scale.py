"""Benchmark: ingest at scale. Prints

1. the bundled hour tiled K times as K tenants (default K = 100: 1.2 M requests, 28.9 M
   lookups), written in three shapes -- the four Mooncake fields; the same with a ``tenant``
   field (ingested with ``--tenant-field tenant``); the same with extra fields of every JSON
   kind (strings, a nested object, arrays, a number, a bool, a null) -- and for each shape the
   time ``polars.read_ndjson`` takes to just read the file, the time ``prefixscope ingest``
   takes to read, validate and store it (process start to exit), their ratio, and the ingest's
   peak RSS (each in its own process, so peaks do not mix; polars and ingest in turn per shape,
   so a busy machine weighs on both);
2. a day of hourly logs (24 files) in one command, then the same command again: the row count
   must not change.

    make bench        # or: .venv/bin/python benchmarks/ingest_scale.py [--copies K]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

BIN = Path(sys.executable).parent
SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
#: Shapes of section 1: file name, extra ingest flags.
SHAPES = {
    "four fields": ("plain.jsonl", []),
    "with tenant": ("tenant.jsonl", ["--tenant-field", "tenant"]),
    "extra fields": ("extra.jsonl", ["--tenant-field", "tenant"]),
}


def write_tiled(folder: Path, copies: int) -> int:
    """The bundled hour as ``copies`` tenants, interleaved in time (copy i shifted by i * 7 ms),
    ids offset per copy except the shared first block, in the three shapes of SHAPES. Returns
    the number of lookups (blocks)."""
    with gzip.open(SAMPLE, "rt") as f:
        rows = [json.loads(x) for x in f]
    top = max(max(r["hash_ids"]) for r in rows if r["hash_ids"]) + 1
    ts = np.array([r["timestamp"] for r in rows], np.int64)
    copy = np.repeat(np.arange(copies), len(rows))
    index = np.tile(np.arange(len(rows)), copies)
    order = np.lexsort((index, copy, ts[index] + 7 * copy))
    files = [(folder / name).open("w") for name, _ in SHAPES.values()]  # noqa: SIM115
    lookups = 0
    try:
        for i, k in zip(copy[order].tolist(), index[order].tolist(), strict=True):
            r = rows[k]
            ids = ", ".join(str(h if h == 0 else h + i * top) for h in r["hash_ids"])
            lookups += len(r["hash_ids"])
            fields = (
                f'"timestamp": {r["timestamp"] + i * 7}, "input_length": {r["input_length"]}, '
                f'"output_length": {r["output_length"]}, "hash_ids": [{ids}]'
            )
            files[0].write(f"{{{fields}}}\n")
            files[1].write(f'{{{fields}, "tenant": "t{i:02d}"}}\n')
            files[2].write(
                f'{{"tenant": "t{i:02d}", "model": "kimi-k2", {fields}, '
                f'"meta": {{"region": "eu-\\u00e9st", "priority": {k % 5}, '
                f'"tags": ["chat", "long"]}}, "extra_ids": [{k}, 7], "cached": null, '
                f'"stream": true, "score": 0.25}}\n'
            )
    finally:
        for f in files:
            f.close()
    return lookups


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (GiB) and stdout of ``cmd``, run in its own process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd[:3]} failed with status {proc.returncode}")
    return wall, usage.ru_maxrss / 2**20, out


def polars_read(path: Path) -> float:
    read = (
        "import time, polars as pl; t = time.perf_counter(); "
        f"df = pl.read_ndjson({str(path)!r}); print(time.perf_counter() - t, df.height)"
    )
    return float(timed([sys.executable, "-c", read])[2].split()[0])


def ingest_cmd(inputs: list[str], wh: Path, *flags: str) -> list[str]:
    return [
        str(BIN / "prefixscope"),
        "ingest",
        "--format",
        "mooncake",
        "--input",
        *inputs,
        "--warehouse",
        str(wh),
        *flags,
    ]


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


def count_rows(wh: Path) -> int:
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute("SELECT count(*) FROM requests").fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=100, help="tenants the hour is tiled to")
    parser.add_argument("--hourly-files", type=int, default=24)
    parser.add_argument("--requests-per-file", type=int, default=20_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        lookups = write_tiled(tmpdir, args.copies)
        print(f"the bundled hour x{args.copies} ({args.copies} tenants, {lookups:,} lookups)")
        for label, (name, flags) in SHAPES.items():
            path = tmpdir / name
            wall_polars = polars_read(path)
            wh = tmpdir / f"{name}.duckdb"
            wall, peak, out = timed(ingest_cmd([str(path)], wh, *flags))
            total = out.strip().splitlines()[-1]
            print(
                f"  {label:12s} {path.stat().st_size / 1e6:5,.0f} MB: polars.read_ndjson "
                f"{wall_polars:5.2f} s, ingest {wall:5.2f} s ({wall / wall_polars:4.2f}x), "
                f"peak RSS {peak:.2f} GiB; {total}"
            )
            wh.unlink()
            path.unlink()
        print(f"  load average after: {os.getloadavg()[0]:.1f}")

        files = []
        for h in range(args.hourly_files):
            f = tmpdir / f"hour{h:02d}.jsonl"
            write_trace(f, args.requests_per_file, seed=100 + h, first_ts=h * 3_600_000)
            files.append(str(f))
        day = tmpdir / "day.duckdb"
        first, _, _ = timed(ingest_cmd(files, day))
        rows_first = count_rows(day)
        again, _, _ = timed(ingest_cmd(files, day))
        print(
            f"{len(files)} hourly files x {args.requests_per_file:,} requests in one command: "
            f"{first:.2f} s, {rows_first:,} rows; same command again: {again:.2f} s, "
            f"{count_rows(day):,} rows"
        )


if __name__ == "__main__":
    main()

"""Benchmark: the ``structure`` analysis alone on the bundled hour tiled as K tenants.

    .venv/bin/python benchmarks/structure_speed.py [--copies 100] [--keep DIR]

Writes the trace as Mooncake JSONL (:func:`write_tiled`: K copies of the hour as K tenants,
copy i 7·i ms later, ids offset per copy except the first block, which every copy shares, a
common system prompt), ingests it (the tenant of each line, its ``tenant`` field, set with one
UPDATE, since the Mooncake reader takes one tenant per file), then, in a fresh process, loads
the trace and the log as the stage does and times ``analyse`` after a warm-up on a small trace
(so compilation is not timed). Peak memory is the process's peak resident set during the
analysis (reset before it through ``/proc/self/clear_refs``), against its resident set once
the trace is loaded and against the bytes of the loaded arrays.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import gzip
import heapq
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"


def write_tiled(copies: int, out: Path) -> None:
    """The bundled hour ``copies`` times, one tenant per copy, merged in arrival order."""
    with gzip.open(SAMPLE, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    top = max(max(r["hash_ids"]) for r in rows if r["hash_ids"]) + 1

    def copy(i: int):  # type: ignore[no-untyped-def]
        for r in rows:
            yield r["timestamp"] + i * 7, i, r

    with out.open("w") as f:
        for ts, i, r in heapq.merge(*(copy(i) for i in range(copies))):
            ids = [h if h == 0 else h + i * top for h in r["hash_ids"]]
            line = {
                "timestamp": ts,
                "input_length": r["input_length"],
                "output_length": r["output_length"],
                "hash_ids": ids,
                "tenant": f"t{i:02d}",
            }
            f.write(json.dumps(line) + "\n")


def build(copies: int, folder: Path) -> Path:
    """The benchmark warehouse in ``folder`` (reused when already there)."""
    import pyarrow as pa
    import pyarrow.json as pj

    from prefixscope import warehouse
    from prefixscope.stages import ingest

    db = folder / f"x{copies}.duckdb"
    if db.exists():
        return db
    jsonl = folder / f"x{copies}.jsonl"
    t = time.perf_counter()
    write_tiled(copies, jsonl)
    ingest.ingest_logs(db, ingest.IngestSettings((str(jsonl),), "mooncake"))
    tenants = pj.read_json(jsonl).column("tenant")
    lines = pa.table({"line": pa.array(range(1, len(tenants) + 1), pa.int64()), "tenant": tenants})
    with warehouse.connect(db) as con:
        con.register("lines", lines)
        con.execute(
            "UPDATE requests SET tenant = lines.tenant FROM lines "
            "WHERE requests.source.line = lines.line"
        )
        (n_tenants,) = con.execute("SELECT count(DISTINCT tenant) FROM requests").fetchone()
    assert n_tenants == copies, f"{n_tenants} tenants, want {copies}"
    jsonl.unlink()
    print(f"built x{copies} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return db


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure(db: Path, simulate_top: int) -> dict[str, float]:
    """Load, warm up, then time one ``analyse`` (run in a fresh process)."""
    import numpy as np
    import pyarrow as pa

    from prefixscope import warehouse
    from prefixscope.analysis.structure.log import RequestLog, load_log
    from prefixscope.analysis.structure.tables import StructureSettings, analyse
    from prefixscope.analysis.structure.turns import LogIds
    from prefixscope.analysis.trace.csr import build_trace
    from prefixscope.analysis.trace.load import load_trace

    with warehouse.connect(db, read_only=True) as con:
        trace = load_trace(con)
        log = load_log(con, trace)
    small = build_trace([[1, 2, 3], [1, 2, 4, 5], [1, 6]], [10, 16, 8], ["a", "a", "b"], 4)
    warm_log = RequestLog(LogIds.empty(3), (), np.array([None] * 3, dtype=object))
    analyse(small, warm_log, StructureSettings(capacity_blocks=4))
    arrays = [
        trace.offsets, trace.blocks, trace.input_tokens, trace.tenant_codes, trace.times,
        trace.hashes, log.ids.chat_id, log.ids.parent_chat_id, log.ids.turn, log.ids.session,
        log.request_type,
    ]  # fmt: skip
    loaded = sum(a.nbytes for a in arrays) + trace.request_ids.nbytes
    # What the load freed goes back first, so the baseline is what the trace holds.
    gc.collect()
    pa.default_memory_pool().release_unused()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    rss = _status_kib("VmRSS") * 1024
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    t, cpu = time.perf_counter(), time.process_time()
    tables = analyse(trace, log, StructureSettings(simulate_top=simulate_top))
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    peak = _status_kib("VmHWM") * 1024
    return {
        "requests": trace.n_requests,
        "lookups": trace.n_lookups,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_loaded": rss,
        "peak": peak,
        "peak_reset": reset,
        "array_bytes": loaded,
        "rows": sum(t.num_rows for t in tables.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="keep (and reuse) the warehouse in this folder")
    parser.add_argument(
        "--simulate-top", type=int, default=10, help="pinned replays (structure's default: 10)"
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.simulate_top)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        db = build(args.copies, folder)
        out = subprocess.run(
            [sys.executable, __file__, "--measure", str(db), f"--simulate-top={args.simulate_top}"],
            check=True, capture_output=True, text=True, env={**os.environ},
        )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    gib = 2**30
    print(
        f"x{args.copies}, --simulate-top {args.simulate_top}: {r['requests']:,} requests, "
        f"{r['lookups']:,} lookups; structure "
        f"{r['seconds']:.2f} s ({r['lookups'] / r['seconds'] / 1e6:.1f} M lookups/s), "
        f"{r['cpu_seconds']:.2f} s of CPU ({r['lookups'] / r['cpu_seconds'] / 1e6:.1f} M "
        f"lookups/s), {r['rows']:,} rows"
    )
    print(
        f"  peak RSS {r['peak'] / gib:.2f} GiB against {r['rss_loaded'] / gib:.2f} GiB once "
        f"loaded ({r['peak'] / r['rss_loaded']:.2f}x; the analysis added "
        f"{(r['peak'] - r['rss_loaded']) / gib:.2f} GiB, "
        f"{(r['peak'] - r['rss_loaded']) / r['array_bytes']:.2f}x the loaded arrays' "
        f"{r['array_bytes'] / gib:.2f} GiB)"
        + ("" if r["peak_reset"] else " [peak not reset: it includes the load]")
    )


if __name__ == "__main__":
    main()

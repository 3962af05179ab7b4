"""Benchmark: what keying the stored block hashes costs an ingest (docs/ingest.md, "Keyed block
hashes"). The bundled hour tiled K times as K tenants (default K = 20: 240 K requests, 5.8 M
lookups, ``ingest_scale.write_tiled``) is ingested with a key and with ``--hash-key-file none``,
in turn, ``--repeats`` times each, each in its own process; prints the median wall time of each,
their ratio (the goal: at most 1.2), and the time to key the lookups alone.

    make bench        # or: .venv/bin/python benchmarks/keyed_ingest.py [--copies K]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from ingest_scale import ingest_cmd, timed, write_tiled

from prefixscope.ingest.hashkey import HashKey


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=20, help="tenants the hour is tiled to")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        lookups = write_tiled(folder, args.copies)
        key = folder / "hash.key"
        key.write_bytes(os.urandom(32))
        trace = folder / "plain.jsonl"
        walls: dict[str, list[float]] = {"keyed": [], "plain": []}
        for _ in range(args.repeats):
            for label, flag in (("keyed", str(key)), ("plain", "none")):
                wh = folder / f"{label}.duckdb"
                wall, _, _ = timed(ingest_cmd([str(trace)], wh, "--hash-key-file", flag))
                walls[label].append(wall)
                wh.unlink()
        keyed, plain = (statistics.median(walls[k]) for k in ("keyed", "plain"))
        values = np.random.default_rng(0).integers(0, 2**63, lookups).astype(np.uint64)
        hk = HashKey(os.urandom(32))
        hk.hashes(values[:10])  # compiled before timing
        t = time.perf_counter()
        hk.hashes(values)
        alone = time.perf_counter() - t
    print(
        f"the bundled hour x{args.copies} ({lookups:,} lookups), median of {args.repeats}: "
        f"ingest with a key {keyed:.2f} s, plain {plain:.2f} s, ratio {keyed / plain:.3f} "
        f"(goal at most 1.2); keying {lookups:,} hashes alone {alone:.2f} s on one core"
    )


if __name__ == "__main__":
    main()

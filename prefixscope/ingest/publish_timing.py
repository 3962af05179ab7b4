"""How long an ingest holds the warehouse's write lock: stage a generated Mooncake file (the
generator of ``benchmarks/ingest_scale.py``), then time :func:`publish` into a fresh warehouse
and again replacing the same rows. Run from the repository:

    .venv/bin/python -m prefixscope.ingest.publish_timing --requests 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

from prefixscope import warehouse
from prefixscope.ingest.formats import IngestOptions
from prefixscope.ingest.loader import publish, stage_files

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "ingest_scale.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("ingest_scale", BENCHMARK)
    assert spec and spec.loader, f"needs the repository's {BENCHMARK}"
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with tempfile.TemporaryDirectory(prefix="prefixscope-publish-") as tmp:
        log, wh = Path(tmp) / "trace.jsonl", Path(tmp) / "wh.duckdb"
        bench.write_trace(log, args.requests, seed=1)
        t0 = time.perf_counter()
        with stage_files([log], "mooncake", IngestOptions()) as staged:
            t1 = time.perf_counter()
            con = warehouse.connect(wh)
            try:
                t2 = time.perf_counter()
                result = publish(con, staged, "publish-timing-1")
                t3 = time.perf_counter()
                publish(con, staged, "publish-timing-2")
                t4 = time.perf_counter()
            finally:
                con.close()
    print(
        f"{result.accepted:,} requests: staging {t1 - t0:.2f} s; publish (the write lock) "
        f"{t3 - t2:.2f} s into an empty warehouse, {t4 - t3:.2f} s replacing the same rows"
    )


if __name__ == "__main__":
    main()

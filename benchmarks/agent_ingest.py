"""Benchmark: a folder of coding-agent conversations ingested whole (``--format agent-json``).

Prints the time ``prefixscope ingest`` takes from process start to exit and its peak RSS, for
the published folder (``--traces PATH``: the ``traces/`` of callanjfox/kv-cache-tester, 710
readable conversations, 441 MiB) or, without it, a folder generated to the same shape (710
conversations, 49,334 requests, 94.3 M block ids: each conversation a run of requests whose
prompt grows by a few blocks, its ids counting up, a compaction now and then). The goal:
under 60 s and 4 GB on 2 cores.

    make bench      # or: .venv/bin/python benchmarks/agent_ingest.py [--traces PATH]
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
#: The published folder's shape (measured on it: benchmarks/RESULTS.md).
CONVERSATIONS = 710
REQUESTS = 49_334
IDS = 94_310_647


def generate(folder: Path, seed: int = 0) -> None:
    """CONVERSATIONS files whose request and id counts add up to about REQUESTS and IDS."""
    rng = np.random.default_rng(seed)
    sizes = rng.multinomial(REQUESTS - CONVERSATIONS, np.full(CONVERSATIONS, 1 / CONVERSATIONS))
    per_request = IDS / REQUESTS  # mean ids a request
    for c, extra in enumerate(sizes):
        n = int(extra) + 1
        # prompts grow linearly from a fifth of the mean to twice it: the mean holds
        blocks = np.linspace(0.2, 1.8, n) * per_request
        blocks = np.maximum(blocks.astype(np.int64), 1)
        next_id, t, lines = 1, 0.0, []
        base = 0
        for k, b in enumerate(blocks):
            if rng.random() < 0.02:  # a compaction: a new history from here
                base = next_id
            ids = range(base + 1, base + 1 + int(b))
            next_id = max(next_id, base + int(b))
            t += float(rng.exponential(20.0))
            model = "opus" if k % 10 else "haiku"
            lines.append(
                f'{{"t": {t:.3f}, "type": "s", "model": "{model}", "in": {int(b) * 64 + 17}, '
                f'"out": 300, "hash_ids": [{",".join(map(str, ids))}], "stop": "tool_use", '
                '"api_time": 5.0, "think_time": 2.0}'
            )
        head = json.dumps({"id": f"gen_{c:04d}", "block_size": 64, "hash_id_scope": "local"})
        body = head[:-1] + ', "requests": [' + ",\n".join(lines) + "]}"
        (folder / f"trace_{c:04d}.json").write_text(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, help="a kv-cache-tester traces/ folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="prefixscope-agents-") as tmp:
        folder = args.traces
        if folder is None:
            folder = Path(tmp) / "traces"
            folder.mkdir()
            started = time.perf_counter()
            generate(folder)
            print(
                f"generated {CONVERSATIONS} conversations in {time.perf_counter() - started:.1f} s"
            )
        size = sum(p.stat().st_size for p in folder.rglob("*.json"))
        wh = Path(tmp) / "agents.duckdb"
        command = [str(BIN / "prefixscope"), "ingest", "--format", "agent-json", "--input",
                   str(folder), "--warehouse", str(wh), "--tenant", "agents"]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9
        if done.returncode != 0:
            print(done.stdout, done.stderr)
            return 1
        with duckdb.connect(str(wh), read_only=True) as con:
            requests, ids = con.execute(
                "SELECT count(*), sum(input_tokens // 64) FROM requests"
            ).fetchone()
        what = "published" if args.traces else "generated"
        print(
            f"agent-json ingest, {what} folder ({size / 2**20:,.0f} MiB, {requests:,} requests, "
            f"{ids / 1e6:,.1f} M ids): {seconds:.1f} s, peak RSS {peak_gb:.2f} GB "
            f"(goal: under 60 s and 4 GB) — {'pass' if seconds < 60 and peak_gb < 4 else 'FAIL'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

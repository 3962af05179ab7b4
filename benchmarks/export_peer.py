"""Fidelity check: the KVCache.AI simulator, run on an export of a gateway-log warehouse, beside
prefixscope's LRU on the warehouse itself (docs/export.md#the-kvcacheai-simulator-on-an-export).

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install kvcache-simulator==0.1.3
    PEER_PYTHON=/tmp/peers/bin/python .venv/bin/python benchmarks/export_peer.py

A generated gateway log (``prefixscope/synthetic_gateway.py``: conversations of three tenants,
16-token blocks) is ingested as ``--format openai``, simulated by prefixscope's LRU at each
capacity, and exported (``prefixscope export --format mooncake``). The peer (never a dependency:
its own interpreter, in a scratch environment) parses the export its way and replays it with its
C++ core. Both are measured the peer's way: token hit rate of the requests from its midpoint
(``request_count // 2``) on, tokens as its parser counts them (each id ``block_size`` tokens,
less for a partial last one). The peer skips a request without ids (a prompt shorter than one
block: never cacheable), so ours is measured on the same requests.

Two of ours are printed: counted as the peer counts (every hit block serves its tokens), and
under vLLM's rule that prefixscope applies to token sources (a whole-block prompt's last block
is always recomputed, so a prompt found whole in the cache serves one block less).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.export.trace import ExportSettings, export_trace
from prefixscope.stages import ingest
from prefixscope.synthetic_gateway import (
    INGEST_OPTIONS,
    EngineCache,
    GatewayWorkload,
    write_gateway_log,
)

# Run in the peer's interpreter: its parser and its C++ core, as its own sweep runs them
# (the same calls as benchmarks/policy_speed.py).
PEER = """
import json, subprocess, sys
from pathlib import Path
from kvcache_sim import cpp_backend
from kvcache_sim.trace import parse_trace_file
trace = parse_trace_file(sys.argv[1])
files = cpp_backend._write_binary_trace(trace, Path(sys.argv[2]))
binary = cpp_backend.ensure_cpp_simulator()
out = subprocess.run([str(binary), "--policy", "batch", "--ids", str(files.ids),
    "--tokens", str(files.tokens), "--request-ends", str(files.request_ends),
    "--request-count", str(trace.request_count), "--total-blocks", str(len(trace.ids)),
    "--warmup-requests", str(trace.request_count // 2), "--capacities", sys.argv[3],
    "--policies", "lru"], capture_output=True, text=True, check=True).stdout
print(json.dumps({"requests": trace.request_count, "block_size": trace.block_size,
    "points": json.loads(out)["points"]}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--capacities", default="250,500,1000,2000,4000,8000")
    args = p.parse_args()
    python = os.environ.get("PEER_PYTHON")
    if not python:
        sys.exit("set PEER_PYTHON to an interpreter with kvcache-simulator==0.1.3 (see --help)")
    with tempfile.TemporaryDirectory(prefix="prefixscope-peer-") as tmp:
        folder = Path(tmp)
        log = write_gateway_log(folder / "gateway.jsonl", GatewayWorkload(sessions=args.sessions),
                                EngineCache(hbm_blocks=4000), seed=args.seed)  # fmt: skip
        wh = folder / "gateway.duckdb"
        ingest.ingest_logs(wh, ingest.IngestSettings((str(log.path),), "openai", INGEST_OPTIONS))
        out = folder / "export.jsonl"
        export_trace(wh, ExportSettings(format="mooncake", out=str(out)))
        with warehouse.reading(wh) as con:
            trace = load_trace(con)
        done = subprocess.run([python, "-c", PEER, str(out), str(folder), args.capacities],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"the peer failed: {done.stderr.strip()[-500:]}")
        peer = json.loads(done.stdout)
        n = trace.blocks_per_request
        kept = np.flatnonzero(n > 0)  # the requests the peer reads
        measured = kept[len(kept) // 2 :]
        tokens = np.minimum(trace.input_tokens, n * trace.block_size)[measured].sum()
        print(f"{trace.n_requests:,} requests ({trace.n_requests - len(kept):,} shorter than a "
              f"block), {trace.n_lookups:,} lookups of {trace.block_size} tokens; the peer read "
              f"{peer['requests']:,} requests at block size {peer['block_size']}")  # fmt: skip
        print(f"{'capacity':>9} {'peer lru':>10} {'ours, peer count':>17} "
              f"{'ours, vLLM rule':>16} {'ours - peer (points)':>21}")  # fmt: skip
        for point in peer["points"]:
            cap, theirs = point["cacheBlocks"], point["lru"]
            if theirs.get("measurementStartRequest", 0) < 0:
                print(f"{cap:>9,} {'—':>10}  the peer's cache never filled before its midpoint")
                continue
            hits = POLICIES["lru"].hit_blocks(trace, cap)
            counted = np.minimum(hits * trace.block_size, trace.input_tokens)[measured].sum()
            rule = hit_tokens(trace, hits)[measured].sum()
            diff = 100 * (counted / tokens - theirs["hitRate"])
            print(f"{cap:>9,} {theirs['hitRate']:>10.4%} {counted / tokens:>17.4%} "
                  f"{rule / tokens:>16.4%} {diff:>+21.6f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

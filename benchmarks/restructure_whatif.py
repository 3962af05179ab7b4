"""Prompt restructuring, what-if: a tenant whose system prompt opens with the request's own time,
before and after ``ingest --move-to-end`` moves the stamp to the end of the prompt.

    python benchmarks/restructure_whatif.py [--sessions 300] [--capacity-blocks 2000]

Generates gateway logs (``synthetic_gateway.py``: tenants ``acme`` and ``globex`` as they are,
``stamped`` opening each system prompt with ``Current time: …Z.``), ingests them twice into
warehouses in a temporary folder, the second with ``--move-to-end``, simulates LRU on both,
prices them (``savings``, Llama-3-8B on one H100) and prints ``prefixscope compare``'s table
(docs/ingest.md, "Restructuring prompts").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from prefixscope.synthetic_gateway import GatewayWorkload, conversation_lines, write_lines

#: The model the savings are priced for.
MODEL = "llama-3-8b"
#: What the stamp looks like (``synthetic_gateway._stamped``): the pattern an operator would give.
STAMP = r"Current time: [0-9T:.-]+Z\. "


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--capacity-blocks", type=int, default=2000)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "prefixscope"]
    workload = GatewayWorkload(
        sessions=args.sessions,
        tenants=("acme", "globex", "stamped"),
        stamped_tenants=("stamped",),
    )
    with tempfile.TemporaryDirectory() as tmp:
        logs = write_lines(Path(tmp) / "logs.jsonl", conversation_lines(workload, seed=3))
        for name, extra in (("before", []), ("after", ["--move-to-end", STAMP])):
            wh = str(Path(tmp) / f"{name}.duckdb")
            ingest = ["ingest", "--format", "openai", "--input", str(logs), "--warehouse", wh]
            subprocess.run([*cli, *ingest, "--tenant-field", "user", *extra], check=True)
            simulate = ["simulate", "--warehouse", wh, "--policy", "lru", "--outcomes"]
            simulate += ["--capacity-blocks", str(args.capacity_blocks)]
            quiet = {"check": True, "stdout": subprocess.DEVNULL}
            subprocess.run([*cli, *simulate], **quiet)
            subprocess.run([*cli, "savings", "--warehouse", wh, "--model", MODEL], **quiet)
        before, after = (str(Path(tmp) / f"{n}.duckdb") for n in ("before", "after"))
        subprocess.run([*cli, "compare", "--before", before, "--after", after], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export round trip: a warehouse's hit rates against those of its export ingested back, for
every policy, capacity, isolation and window, compared to the token (docs/export.md).

    .venv/bin/python benchmarks/export_roundtrip.py                 # the bundled trace and a
                                                                    # generated gateway log
    .venv/bin/python benchmarks/export_roundtrip.py --gateway-sessions 400 --salt s3cret

Each warehouse is simulated by the command line (``prefixscope simulate``), exported
(``prefixscope export``, with ``--salt`` when given), the file ingested into a new warehouse by
the command the export prints, and simulated again with the same flags; the two ``hit_rates``
tables are compared row by row (requests, input, hit and cross-tenant hit tokens, hit requests,
warm-up).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from prefixscope.cli import main
from prefixscope.synthetic_gateway import EngineCache, GatewayWorkload, write_gateway_log

BUNDLED = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
POLICIES = "ceiling,lru,fifo,lfu,ttl,s3fifo,belady,pinned"
COMPARED = (
    "tenant, policy, policy_options, isolation, capacity_blocks, measure_window, requests, "
    "input_tokens, hit_tokens, cross_tenant_hit_tokens, hit_requests, warmup_requests"
)


def cli(*words: str) -> str:
    """Run a command in this process; its standard output (a failure stops the script)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(words))
    if status != 0:
        sys.exit(f"failed ({status}): prefixscope {shlex.join(words)}")
    return out.getvalue()


def simulate(wh: Path, capacities: str) -> list[tuple]:
    cli(
        "simulate", "--warehouse", str(wh), "--policy", POLICIES, "--capacity-blocks",
        capacities, "--ttl", "300", "--pin-top", "20", "--isolation",
        "shared,salted,partitioned", "--window", "all,last-half,steady",
    )  # fmt: skip
    with duckdb.connect(str(wh), read_only=True) as con:
        return con.execute(f"SELECT {COMPARED} FROM hit_rates ORDER BY ALL").fetchall()


def round_trip(name: str, wh: Path, folder: Path, capacities: str, salt: str | None) -> bool:
    before = simulate(wh, capacities)
    out = folder / f"{name}.jsonl.gz"
    started = time.perf_counter()
    said = cli(
        "export", "--warehouse", str(wh), "--format", "mooncake", "--out", str(out),
        *(["--salt", salt] if salt else []),
    )  # fmt: skip
    export_s = time.perf_counter() - started
    again = folder / f"{name}-again.duckdb"
    reingest = said.split("read it back with: ", 1)[1].splitlines()[0].strip()
    words = shlex.split(reingest)[1:]
    words[words.index("--warehouse") + 1] = str(again)
    cli(*words)
    after = simulate(again, capacities)
    same = before == after
    differing = sum(a != b for a, b in zip(before, after, strict=False))
    print(f"## {name}")
    print(said.strip())
    print(
        f"hit_rates rows: {len(before)} before, {len(after)} after; "
        f"{'identical to the token' if same else f'{differing} rows differ'}; "
        f"export took {export_s:.2f} s"
    )
    tokens = sum(r[8] for r in before if r[1] == "lru" and r[3] == "shared" and r[0] == "*")
    print(f"(LRU shared fleet hit tokens summed over capacities and windows: {tokens:,})")
    return same


def main_(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gateway-sessions", type=int, default=200)
    p.add_argument("--salt", default=None)
    args = p.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory(prefix="prefixscope-roundtrip-") as tmp:
        folder = Path(tmp)
        bundled = folder / "bundled.duckdb"
        cli("ingest", "--format", "mooncake", "--input", str(BUNDLED), "--warehouse", str(bundled))
        ok &= round_trip("bundled", bundled, folder, "1000,10000,50000", args.salt)
        log = write_gateway_log(
            folder / "gateway.jsonl",
            GatewayWorkload(sessions=args.gateway_sessions),
            EngineCache(hbm_blocks=4000),
            seed=7,
        )
        gateway = folder / "gateway.duckdb"
        cli(
            "ingest", "--format", "openai", "--tenant-field", "user", "--input", str(log.path),
            "--warehouse", str(gateway),
        )  # fmt: skip
        ok &= round_trip("gateway", gateway, folder, "500,2000,8000", args.salt)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main_())

"""prefixscope's vLLM pool against vLLM's own code, request by request.

    .venv/bin/python benchmarks/engine_conformance.py [--trace FILE] [--vllm-python PY]
        [--capacities 1000,4000,16000] [--loads 1,2,4] [--requests N] [--out FILE.json]

vLLM runs in a scratch environment outside the repository (``make peers`` builds it at
``$TMPDIR/prefixscope-peers/vllm``; never a dependency), driven by ``benchmarks/vllm_driver.py``:
its v1 ``KVCacheManager`` and ``Scheduler`` with no model and no GPU. The trace (default: the
bundled hour) is ingested here, and the same requests go to both sides:

- **one request at a time**, vLLM's KV cache manager against ``fleet --engine vllm
  --replicas 1`` with every request alone (arrivals far apart, no output) and against
  ``simulate --vllm-blocks`` (LRU), at each capacity;
- **under load**, vLLM's scheduler against ``fleet --engine vllm --replicas 1`` at each load
  and capacity (the first ``--requests`` requests), every step of both priced by the
  same step form (llama-3-8b on an H100, the roofline's, ``fleet/stepcost.py``), so both see
  the same clock: cached tokens at each request's first admission, preemptions, TTFT, and the
  hit rate as vLLM's own metric counts it.

SGLang's ``RadixCache`` (``benchmarks/sglang_driver.py``, in its own scratch environment,
``make peers-sglang``), where it is installed, against ``fleet --engine sglang --replicas 1``
one request at a time too, at each capacity.

vLLM's pool of ``N`` blocks holds one null block, so it is given ``N + 1``. Prints a table per
part and writes every figure to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from prefixscope import warehouse
from prefixscope.analysis.cost.gpus import resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.fleet.run import Engine, Fleet, Traffic, simulate_fleet
from prefixscope.analysis.fleet.stepcost import from_roofline
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.structure.answers import answer_blocks
from prefixscope.analysis.trace.full_blocks import full_blocks_only
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.ingest import IngestOptions
from prefixscope.stages import ingest as ingest_stage

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
PEERS = Path(os.environ.get("TMPDIR", "/tmp")) / "prefixscope-peers" / "vllm"
SGLANG = PEERS.parent / "sglang"
COST = from_roofline(resolve_model("llama-3-8b"), resolve_gpu("h100"))
ENGINE = Engine(COST)  # budget 8,192 tokens a step and 256 sequences: vLLM's defaults


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def generated(path: Path, conversations: int, seed: int = 11) -> Path:
    """A Mooncake file of multi-turn conversations unlike the bundled hour: a few system
    prompts shared across conversations, each turn re-sending the conversation so far plus a
    new message of any length (so most prompts end in a partial block), outputs of 20 to 800
    tokens, conversations starting as a Poisson process and turns 5 to 60 s apart."""
    rng = np.random.default_rng(seed)
    rows, next_id = [], 1000
    systems = [[s * 10 + k for k in range(int(rng.integers(1, 6)))] for s in range(8)]
    start = np.cumsum(rng.exponential(2.0, conversations))
    for c in range(conversations):
        tokens = len(system := systems[int(rng.integers(0, len(systems)))]) * 512
        blocks, at = list(system), float(start[c])
        for _ in range(int(rng.integers(1, 7))):
            if tokens % 512:  # the last turn's partial block grows: new content, a new id
                blocks[-1], next_id = next_id, next_id + 1
            tokens += int(rng.integers(20, 3000))
            while len(blocks) * 512 < tokens:
                blocks, next_id = [*blocks, next_id], next_id + 1
            rows.append((at, tokens, int(rng.integers(20, 800)), list(blocks)))
            at += float(rng.uniform(5, 60))
    rows.sort(key=lambda r: r[0])
    with path.open("w") as f:
        for at, tokens, out, blocks in rows:
            line = {"timestamp": int(at * 1000), "input_length": tokens, "output_length": out,
                    "hash_ids": blocks}  # fmt: skip
            f.write(json.dumps(line) + "\n")
    return path


def load(trace_file: Path, work: Path):  # type: ignore[no-untyped-def]
    wh = work / "w.duckdb"
    settings = ingest_stage.IngestSettings((str(trace_file),), "mooncake", IngestOptions())
    ingest_stage.ingest_logs(str(wh), settings)
    with warehouse.connect(wh, read_only=True) as con:
        return load_trace(con), load_traffic(con)


def driver_lines(trace, traffic, load_scale: float, n: int, answers: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """The first ``n`` requests as the driver reads them: the trace's block ids (equal ids,
    equal blocks), arrivals on the scaled clock. With ``answers``, each request's answer as
    prefixscope's pools cache it (``structure/answers.py``): the next turn's ids, which the driver
    makes its stand-in model generate; a partial last prompt block takes the first answer
    block's id, so its tokens are the ones the next turn's block starts with."""
    found = answer_blocks(trace, traffic.output_tokens[:n]) if answers else None
    out = []
    for r in range(n):
        blocks = trace.blocks[trace.offsets[r] : trace.offsets[r + 1]].tolist()
        line = {
            "id": str(r), "arrival_s": float(trace.times[r]) / load_scale, "blocks": blocks,
            "input_tokens": int(trace.input_tokens[r]),
            "output_tokens": int(traffic.output_tokens[r]),
        }  # fmt: skip
        if found is not None and found.count[r]:
            b, first = int(found.child[r]), int(found.first[r])
            start = int(trace.offsets[b]) + first
            line["answer"] = trace.blocks[start : start + int(found.count[r])].tolist()
            line["answer_from"] = first
            if len(blocks) > first:  # the partial block the answer completes
                blocks[first] = line["answer"][0]
        out.append(json.dumps(line))
    return out


def run_driver(python: str, lines: list[str], work: Path, *args: str, engine: str = "vllm") -> dict:
    src, out = work / "requests.jsonl", work / f"{engine}.json"
    src.write_text("\n".join(lines) + "\n")
    cmd = [python, str(ROOT / "benchmarks" / f"{engine}_driver.py"), "--trace", str(src)]
    done = subprocess.run([*cmd, *args, "--out", str(out)], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{engine}'s driver failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def agreement(ours: np.ndarray, theirs: np.ndarray, inputs: np.ndarray) -> dict:
    differ = np.flatnonzero(ours != theirs)
    a, b = ours.sum() / inputs.sum(), theirs.sum() / inputs.sum()
    return {
        "requests": int(len(ours)),
        "equal_share": 1 - len(differ) / len(ours),
        "differ": int(len(differ)),
        "hit_rate": float(a),
        "vllm_hit_rate": float(b),
        "relative_error": float(abs(a - b) / b) if b else 0.0,
    }


def one_at_a_time(
    python: str,
    trace,
    traffic,
    capacities,
    work: Path,
    sglang: str | None = None,
    sglang_evict: str = "nodes",
) -> list[dict]:  # type: ignore[no-untyped-def]
    n = trace.n_requests
    lines = driver_lines(trace, Traffic(np.zeros(n, np.int64)), 1.0, n)
    view = full_blocks_only(trace)
    alone = Traffic(np.zeros(n, np.int64))
    rows = []
    for c in capacities:
        t0 = time.perf_counter()
        vllm = run_driver(python, lines, work, "--mode", "manager", "--blocks", str(c + 1))
        theirs = np.array([r["cached_tokens"] for r in vllm["requests"]], np.int64)
        fleet = simulate_fleet(trace, alone, Fleet("round-robin", 1, c, load_scale=1e-6,
                                                   engine="vllm"), ENGINE).hit_tokens  # fmt: skip
        cache = hit_tokens(view, POLICIES["lru"].hit_blocks(view, c))
        for side, ours in (("fleet --engine vllm", fleet), ("simulate --vllm-blocks", cache)):
            row = {"capacity": c, "side": side, **agreement(ours, theirs, trace.input_tokens)}
            rows.append(row)
        if sglang:  # SGLang's pool has no null page: it is given N
            radix = run_driver(
                sglang, lines, work, "--blocks", str(c), "--evict", sglang_evict, engine="sglang"
            )
            theirs = np.array([r["cached_tokens"] for r in radix["requests"]], np.int64)
            radix_fleet = Fleet("round-robin", 1, c, load_scale=1e-6, engine="sglang")
            ours = simulate_fleet(trace, alone, radix_fleet, ENGINE).hit_tokens
            side = "fleet --engine sglang, against SGLang's RadixCache"
            rows.append(
                {"capacity": c, "side": side, **agreement(ours, theirs, trace.input_tokens)}
            )
        print(f"  {c:,} blocks: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return rows


def under_load(python, trace, traffic, capacities, loads, n, work: Path) -> list[dict]:  # type: ignore[no-untyped-def]
    from prefixscope.analysis.trace.isolation import subset

    first = np.arange(n)
    part, part_traffic = subset(trace, first), traffic.take(first)
    cost = ",".join(f"{x:.12g}" for x in COST.array())
    rows = []
    for load_scale in loads:  # a load's requests are the same at every capacity
        lines = driver_lines(part, part_traffic, load_scale, n, answers=True)
        for capacity in capacities:
            rows.append(
                _loaded(python, lines, part, part_traffic, capacity, load_scale, cost, work)
            )
    return sorted(rows, key=lambda row: row["capacity"])  # stable: loads in order


def _loaded(python, lines, part, part_traffic, capacity, load_scale, cost, work) -> dict:  # type: ignore[no-untyped-def]
    """One capacity and load under vLLM's scheduler and the fleet."""
    vllm = run_driver(python, lines, work, "--mode", "scheduler", "--blocks",
                      str(capacity + 1), "--cost", cost)  # fmt: skip
    reqs = vllm["requests"]
    theirs = np.array([r["cached_tokens"] or 0 for r in reqs], np.int64)
    out = simulate_fleet(part, part_traffic, Fleet("round-robin", 1, capacity,
                         load_scale=load_scale, engine="vllm"), ENGINE)  # fmt: skip
    ttft = np.array([r["ttft_s"] for r in reqs], np.float64)
    row = {
        "capacity": capacity, "load": load_scale,
        **agreement(out.hit_tokens, theirs, part.input_tokens),
        "vllm_metric_hit_rate": vllm["vllm_prefix_cache_stats"]["hit_rate"],
        "preemptions": int(out.preemptions.sum()),
        "vllm_preemptions": int(vllm["total_preemptions"]),
        "ttft_p95_s": float(np.percentile(out.ttft, 95)),
        "vllm_ttft_p95_s": float(np.percentile(ttft, 95)),
        "running_blocks_mean": float(out.running_blocks_mean.mean()),
        "vllm_blocks_used_mean": float(vllm["time_weighted_mean_blocks_used"]),
        "second_copies": int(vllm["second_copies"]["made"]),
        "hits_on_second_copies": int(vllm["second_copies"]["hits_on_them"]),
    }  # fmt: skip
    return row


def table(rows: list[dict], keys: list[str]) -> str:
    head = "| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n"
    return head + "\n".join(
        "| " + " | ".join(
            f"{r[k]:.5g}" if isinstance(r[k], float) else f"{r[k]}" for k in keys
        ) + " |" for r in rows
    )  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, default=BUNDLED, help="a Mooncake trace (.jsonl[.gz])")
    p.add_argument("--generated", type=int, metavar="N", help="instead: N generated conversations")
    p.add_argument("--vllm-python", default=str(PEERS / "bin" / "python"))
    p.add_argument(
        "--sglang-python", default=str(SGLANG / "bin" / "python"),
        help="SGLang's environment (skipped where it is not installed)",
    )  # fmt: skip
    p.add_argument(
        "--sglang-evict", choices=["nodes", "pages"], default="nodes",
        help="pages: SGLang's evict frees only the pages it needs (a what-if, sglang_driver.py)",
    )  # fmt: skip
    p.add_argument("--capacities", type=ints, default=[1000, 4000, 16000])
    p.add_argument("--loads", type=floats, default=[1.0, 2.0, 4.0])
    p.add_argument("--requests", type=int, default=3000, help="under load: the first N")
    p.add_argument("--one-at-a-time", action="store_true", help="skip the part under load")
    p.add_argument("--out", type=Path, default=Path("engine_conformance.json"))
    args = p.parse_args()
    if not Path(args.vllm_python).exists():
        print(f"no vLLM environment at {args.vllm_python}: run `make peers` first")
        return 2
    version = subprocess.run(
        [args.vllm_python, "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="prefixscope-conformance-") as tmp:
        work = Path(tmp)
        if args.generated:
            args.trace = generated(work / "generated.jsonl", args.generated)
        trace, traffic = load(args.trace, work)
        print(f"{args.trace.name}: {trace.n_requests:,} requests; vLLM {version}")
        sglang = args.sglang_python if Path(args.sglang_python).exists() else None
        if sglang is None:
            print(f"no SGLang environment at {args.sglang_python}: its RadixCache is skipped")
        alone = one_at_a_time(
            args.vllm_python, trace, traffic, args.capacities, work, sglang, args.sglang_evict
        )
        print("\none request at a time (vLLM's KVCacheManager; SGLang's RadixCache):")
        keys = ["capacity", "side", "requests", "equal_share", "hit_rate", "vllm_hit_rate",
                "relative_error"]  # fmt: skip
        print(table(alone, keys))
        n = min(args.requests, trace.n_requests)
        loaded = (
            []
            if args.one_at_a_time
            else under_load(args.vllm_python, trace, traffic, args.capacities, args.loads, n, work)
        )
        if loaded:
            print(f"\nunder load (vLLM's Scheduler), the first {n:,} requests:")
            keys = ["capacity", "load", "equal_share", "hit_rate", "vllm_metric_hit_rate",
                    "relative_error", "preemptions", "vllm_preemptions", "ttft_p95_s",
                    "vllm_ttft_p95_s", "second_copies"]  # fmt: skip
            print(table(loaded, keys))
    figures = {"vllm": version, "trace": str(args.trace), "sglang_evict": args.sglang_evict,
               "one_at_a_time": alone, "under_load": loaded}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1))
    print(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

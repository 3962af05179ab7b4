"""Benchmark: every policy at 8 capacities on the multi-tenant ×20 trace, beside the KVCache.AI
simulator's C++ core when it is installed, in the same run.

The trace is the bundled hour tiled as K tenants (``shared/tools/make_bench_trace.py K``, K = 20
unless ``--copies``: 240,620 requests, 5.77 M block lookups), ingested with ``prefixscope``'s
Mooncake reader into a scratch warehouse and loaded once. The capacities are 400·K × 2^i
blocks, i = 0 … 7 (8,000 … 1,024,000 for K = 20; the largest fills before the trace's midpoint,
which the peer requires of every capacity it measures).

On one core, each round times, per policy, the 8 replays one after another (``ceiling`` has no
capacity: one replay); ``belady`` and ``s3fifo`` also need the trace's parents, derived once per
trace and timed on its own line. The figures are seconds for the 8 replays and lookups per
second (8 × lookups / seconds).

The peer (``kvcache-simulator`` on PyPI, import name ``kvcache_sim``) is never a dependency: set
``PEER_PYTHON`` to an interpreter that has it, and the benchmark asks that interpreter to parse
the trace and write its binary trace files once (not timed: pure Python, tens of seconds), then
times the peer's C++ binary itself on them, one process per policy (``lru``, ``fifo``,
``optimal``) with the same 8 capacities, in each round right after ours. Each such process loads
the files, builds its prefix trie and next uses, then replays: all of it is the peer's time. Its
setup alone (a run at capacity 0) is printed too. Without ``PEER_PYTHON`` the peer's columns are
left out, with a note.

The hit rates are compared in the peer's measure (the token hit rate of the requests from
``n // 2`` on), capacity by capacity, ours minus the peer's, in points. ``lru`` should agree: the
peer evicts before each insert and ours after the request, which can only matter when a request
does not fit. ``fifo`` inserts a request's blocks in another order (docs/simulation.md) and
``optimal`` may decline to insert a block, so those two are printed, not required to agree.

Then each row policy with a fast path of its own (``lru``'s touch log, ``fifo``'s ring) is timed
against the loop over its row operations, which define it, in the same rounds, and their hits
must be equal.

``--against REV`` times an earlier release side by side in the same run: this checkout and a
git worktree of REV each serve from a process of their own (``--serve``, that code on its
path), which loads the same trace file and replays each policy when asked, in each round right
after ours, the two taking turns to go first. Each policy's ratio, this checkout's over REV's,
best round against best round, is printed beside the 1.15 that issue 35 allows, and every
side's hit blocks must equal ours (a sum per capacity).

    .venv/bin/python benchmarks/policy_speed.py [--copies 20] [--rounds 3] [--trace FILE]
    PEER_PYTHON=/path/to/bin/python .venv/bin/python benchmarks/policy_speed.py
    .venv/bin/python benchmarks/policy_speed.py --against 2742a74
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import one_core

from prefixscope import warehouse
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.isolation import subset
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.stages import ingest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("ceiling", "lru", "fifo", "lfu", "s3fifo", "belady")
PEER = {"lru": "lru", "fifo": "fifo", "belady": "optimal"}  # ours -> the peer's name
NEEDS_PARENTS = ("s3fifo", "belady")

# Run in the peer's interpreter: parse the trace its way, write its binary trace files, build
# (or find) its C++ binary, and print how to run it. Its private writer is the one its own sweep
# uses (kvcache_sim.cpp_backend.run_cpp_sweep), so the files are exactly what it would replay.
PEER_SETUP = """
import json, sys
from pathlib import Path
from kvcache_sim import cpp_backend
from kvcache_sim.trace import parse_trace_file
trace = parse_trace_file(sys.argv[1], block_size=int(sys.argv[3]))
files = cpp_backend._write_binary_trace(trace, Path(sys.argv[2]))
binary = cpp_backend.ensure_cpp_simulator()
print(json.dumps({"command": [str(binary), "--policy", "batch",
    "--ids", str(files.ids), "--tokens", str(files.tokens),
    "--request-ends", str(files.request_ends), "--request-count", str(trace.request_count),
    "--total-blocks", str(len(trace.ids)), "--warmup-requests", str(trace.request_count // 2)]}))
"""


def make_trace_tool() -> Path:
    for base in (ROOT.parent, ROOT):
        tool = base / "shared/tools/make_bench_trace.py"
        if tool.is_file():
            return tool
    sys.exit("shared/tools/make_bench_trace.py not found beside or inside the checkout")


def load(copies: int, trace_file: Path | None, tmp: Path) -> tuple[Trace, Path]:
    """Make (or reuse) the trace file, ingest it, and load the trace."""
    path = trace_file or tmp / f"bench_x{copies}.jsonl"
    if not path.is_file():
        subprocess.run([sys.executable, str(make_trace_tool()), str(copies), str(path)], check=True)
    db = tmp / "policy_speed.duckdb"
    t = time.perf_counter()
    ingest.ingest_logs(db, ingest.IngestSettings((str(path),), "mooncake"))
    with warehouse.reading(db) as con:
        trace = load_trace(con)
    print(f"trace: {path.name}, ingested and loaded in {time.perf_counter() - t:.1f} s")
    return trace, path


def peer_command(python: str, trace_file: Path, block_size: int, tmp: Path) -> list[str] | None:
    out = tmp / "peer"
    out.mkdir()
    t = time.perf_counter()
    done = subprocess.run(
        [python, "-c", PEER_SETUP, str(trace_file), str(out), str(block_size)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"peer: not run, its setup failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    print(f"peer: trace parsed and written by its Python in {time.perf_counter() - t:.0f} s")
    return json.loads(done.stdout)["command"]


def run_peer(command: list[str], policy: str, capacities: list[int]) -> tuple[float, dict]:
    """One process of the peer's binary: seconds, and its hit rate per capacity."""
    argv = [*command, "--capacities", ",".join(map(str, capacities)), "--policies", policy]
    t = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    sec = time.perf_counter() - t
    rates = {
        p["cacheBlocks"]: (p[policy]["hitRate"], p[policy]["measurementStartRequest"])
        for p in json.loads(out)["points"]
    }
    return sec, rates


def replay_all(trace: Trace, name: str, capacities: list[int]) -> tuple[float, dict]:
    policy = POLICIES[name]
    caps = capacities if policy.bounded else [None]
    hits = {}
    t = time.perf_counter()
    for cap in caps:
        hits[cap] = policy.hit_blocks(trace, cap)
    return time.perf_counter() - t, hits


def last_half_rate(trace: Trace, hits: np.ndarray) -> float:
    """The peer's measure: token hit rate of the requests from ``n // 2`` on."""
    half = trace.n_requests // 2
    return float(hit_tokens(trace, hits)[half:].sum() / trace.input_tokens[half:].sum())


def warm(trace: Trace) -> None:
    """Compile, or load numba's cached machine code, on the trace's head."""
    head = subset(trace, np.arange(min(300, trace.n_requests)))
    for name in OURS:
        POLICIES[name].hit_blocks(head, 100 if POLICIES[name].bounded else None)


def serve(copies: int, trace_file: Path) -> None:
    """``--serve``: the side of ``--against``: load the trace, then replay each policy named on
    a line of stdin, answering a line of JSON (seconds, hit blocks per capacity)."""
    capacities = [400 * copies * 2**i for i in range(8)]
    with tempfile.TemporaryDirectory() as tmp_name:
        with contextlib.redirect_stdout(sys.stderr):
            trace, _ = load(copies, trace_file, Path(tmp_name))
            warm(trace)
            trace.parent  # noqa: B018 - derived once per trace, as on our side
        print("ready", flush=True)
        for line in sys.stdin:
            sec, hits = replay_all(trace, line.strip(), capacities)
            sums = [int(h.sum()) for h in hits.values()]
            print(json.dumps({"seconds": sec, "hits": sums}), flush=True)


class Side:
    """A checkout's code replaying in a process of its own (``serve``): ``tree`` on its path."""

    def __init__(self, label: str, tree: Path, copies: int, trace_file: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", "--copies", str(copies),
             "--trace", str(trace_file)],
            cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            sys.exit(f"{label}: its side did not start (its output is above)")
        self.label = label

    def replay(self, name: str) -> tuple[float, list[int]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"{self.label}: its side stopped at {name} (its output is above)")
        answer = json.loads(line)
        return answer["seconds"], answer["hits"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()


@contextlib.contextmanager
def against_sides(rev: str, copies: int, trace_file: Path, tmp: Path):  # type: ignore[no-untyped-def]
    """This checkout and REV (a worktree), each serving from a process of its own: the same
    footing for both (measured: this checkout replaying in the benchmark's own process read
    up to 1.08 against the same code in a served one, on lfu)."""
    tree = tmp / "against"
    verify = ["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"]
    known = subprocess.run(verify, capture_output=True, check=False)
    if known.returncode != 0:
        sys.exit(f"--against {rev}: not a commit of this checkout")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
                   check=True)  # fmt: skip
    sides = []
    try:
        sides = [Side("this checkout", ROOT, copies, trace_file),
                 Side(rev, tree, copies, trace_file)]  # fmt: skip
        yield sides
    finally:
        for side in sides:
            side.close()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       check=False)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--copies", type=int, default=20, help="tenants: copies of the bundled hour")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--trace", type=Path, help="reuse this trace file (else made in a temp dir)")
    p.add_argument("--against", metavar="REV", help="time this git revision side by side")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.copies, args.trace)
        return
    capacities = [400 * args.copies * 2**i for i in range(8)]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trace, trace_file = load(args.copies, args.trace, tmp)
        peer_python = os.environ.get("PEER_PYTHON")
        command = None
        if peer_python:
            command = peer_command(peer_python, trace_file, trace.block_size, tmp)
        else:
            print("peer: PEER_PYTHON not set, its columns are left out")
        print(
            f"{trace.n_requests:,} requests, {trace.n_lookups:,} lookups, "
            f"{trace.n_unique:,} distinct blocks, {len(trace.tenants)} tenant name(s); "
            f"capacities {', '.join(f'{c:,}' for c in capacities)}"
        )
        print(f"timing on one core ({one_core()})")
        # started pinned, on our core: the sides take turns, never run at once
        with contextlib.ExitStack() as stack:
            sides = []
            if args.against:
                sides = stack.enter_context(
                    against_sides(args.against, args.copies, trace_file, tmp)
                )
            rounds(args, trace, capacities, command, sides)


def rounds(  # type: ignore[no-untyped-def]
    args: argparse.Namespace, trace: Trace, capacities: list[int], command, sides
) -> None:
    """Every policy, round by round: ours in this process (beside the peer), then each served
    side, which goes first in every other round."""
    warm(trace)
    t = time.perf_counter()
    trace.parent  # noqa: B018 - derived once per trace, for belady and s3fifo
    print(f"parents derived once per trace: {time.perf_counter() - t:.2f} s")
    if command:
        setup, _ = run_peer(command, "lru", [0])
        print(f"peer setup alone (load, trie, next uses; capacity 0): {setup:.2f} s")
    ours: dict[str, list[float]] = {n: [] for n in OURS}
    peer: dict[str, list[float]] = {n: [] for n in PEER}
    served: list[dict[str, list[float]]] = [{n: [] for n in OURS} for _ in sides]
    for rnd in range(args.rounds):
        for name in OURS:
            sec, hits = replay_all(trace, name, capacities)
            ours[name].append(sec)
            if command and name in PEER:
                psec, rates = run_peer(command, PEER[name], capacities)
                peer[name].append(psec)
                if rnd == 0:
                    compare(trace, name, hits, rates)
            order = range(len(sides)) if rnd % 2 == 0 else reversed(range(len(sides)))
            for k in order:  # each side first in every other round
                ssec, sums = sides[k].replay(name)
                served[k][name].append(ssec)
                if sums != [int(h.sum()) for h in hits.values()]:
                    print(f"  {name}: hit blocks DIFFER on {sides[k].label}")
    report(trace, ours, peer, capacities, args.rounds)
    fast_paths(trace, capacities, args.rounds)
    if sides:
        side_by_side(sides[1].label, served[0], served[1])


def fast_paths(trace: Trace, capacities: list[int], rounds: int) -> None:
    """Each row policy with a fast path of its own (``lru``'s touch log, ``fifo``'s ring)
    against the loop over its operations, the policy's definition: the 8 replays, best round
    each, and their hits, which must be equal."""
    # imported here: a served side of --against may predate row policies
    from prefixscope.analysis.policies import PolicyOptions, RowPolicy, row_policies

    print("\nfast paths against their row operations' loop: seconds for the 8 replays, best round")
    options = PolicyOptions(cross=False)
    for name, policy in row_policies().items():
        if type(policy)._run is RowPolicy._run:
            continue
        head = subset(trace, np.arange(min(300, trace.n_requests)))
        RowPolicy._run(policy, head, 100, options)  # its loop compiled before it is timed
        fast, ops, same = [], [], True
        for _ in range(rounds):
            t = time.perf_counter()
            got = [policy.replay(trace, c, options).hit_blocks for c in capacities]
            fast.append(time.perf_counter() - t)
            t = time.perf_counter()
            want = [RowPolicy._run(policy, trace, c, options)[0] for c in capacities]
            ops.append(time.perf_counter() - t)
            same = same and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        verdict = "the same hits" if same else "hits DIFFER"
        print(f"{name:<8} fast path {min(fast):.3f} s, row operations {min(ops):.3f} s "
              f"({min(ops) / min(fast):.1f}×), {verdict}")  # fmt: skip


def side_by_side(rev: str, ours: dict, theirs: dict, allowed: float = 1.15) -> None:
    print(f"\nthis checkout against {rev}, each served, in the same rounds: seconds per round,")
    print("this checkout's / REV's (best / best)")
    for name, secs in ours.items():
        ratio = min(secs) / min(theirs[name])
        verdict = "within" if ratio <= allowed else "OVER"
        print(
            f"{name:<8} {', '.join(f'{s:.2f}' for s in secs):>20}  "
            f"{', '.join(f'{s:.2f}' for s in theirs[name]):>20}  {ratio:.2f} ({verdict} {allowed})"
        )


def compare(trace: Trace, name: str, hits: dict, rates: dict) -> None:
    diffs = []
    for cap, (rate, start) in rates.items():
        if start < 0:
            print(f"  peer {PEER[name]} @ {cap:,}: not filled before the midpoint")
            continue
        diffs.append(100 * (last_half_rate(trace, hits[cap]) - rate))
    line = ", ".join(f"{d:+.3f}" for d in diffs)
    print(f"  hit rate, last half, ours − peer {PEER[name]} (points, by capacity): {line}")
    if name == "lru":  # the one policy whose rule is the same in both
        worst = max(map(abs, diffs), default=0.0)
        verdict = "agrees" if worst < 0.01 else "DIFFERS"
        print(f"  lru: {verdict} (largest |difference| {worst:.3f} points)")


def report(trace: Trace, ours: dict, peer: dict, capacities: list[int], rounds: int) -> None:
    print(f"\n{rounds} round(s); seconds for the 8 replays (ceiling: 1), per round; lookups/s and")
    print("best / best from each side's fastest round (the machine's other work slows either)")
    print(f"{'policy':<8} {'seconds':>24} {'M lookups/s':>12}  {'peer':>24}  ours / peer")
    for name, secs in ours.items():
        runs = len(capacities) if POLICIES[name].bounded else 1
        best = min(secs)
        row = (
            f"{name:<8} {', '.join(f'{s:.2f}' for s in secs):>24} "
            f"{runs * trace.n_lookups / best / 1e6:>12.1f}"
        )
        if peer.get(name):
            ratios = [o / q for o, q in zip(secs, peer[name], strict=True)]
            row += (
                f"  {', '.join(f'{s:.2f}' for s in peer[name]):>24}  "
                f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}, "
                f"best / best {best / min(peer[name]):.2f}"
            )
        print(row)


if __name__ == "__main__":
    main()

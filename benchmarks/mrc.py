"""Benchmark: hit-rate curves.

1. The exact one-pass LRU curve against one compiled LRU run and against 30 single-capacity
   runs, on the bundled trace tiled to 25 M block lookups (as ``simulator_core.py``), and the
   check that the curve equals those 30 runs to the token.
2. Sampling error (mean and max absolute error in token hit rate against the exact curve) at
   rates 0.1 and 0.01, on a 25 M-lookup trace of the synthetic generator below and on the
   bundled trace: block sampling (both estimators; over all capacities, and split at 100
   sampled blocks), plain and with heads (the first block of each request kept whole,
   ``--sample-head 1``), and family sampling.
3. A sampled curve (rate 0.01: block sampling plain and with heads, family sampling) of a
   250 M-lookup synthetic trace,
   streamed through the sampler in chunks: time and peak memory (``ru_maxrss``), each in a
   fresh process so nothing else counts.

    make bench        # or: .venv/bin/python benchmarks/mrc.py

The synthetic generator (vectorized numpy, chunk by chunk): sessions of 8 turns, 2,000 of them
interleaved at a time; each turn adds 3 blocks to the session's conversation. Half the sessions
open with one of 2,000 system prompts (Zipf popularity, exponent 1.1, 2 to 16 blocks), the others
with their own first block; four tenants by session.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from prefixscope import warehouse
from prefixscope.analysis.curves.block_sampling import sample_block_batches, sample_blocks
from prefixscope.analysis.curves.curve import capacity_points
from prefixscope.analysis.curves.exact import lru_curve
from prefixscope.analysis.curves.sampled import ESTIMATORS, estimates, sampled_sums
from prefixscope.analysis.curves.sampling import keep, mix, sample_batches, sample_trace
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.load import load_trace
from prefixscope.analysis.trace.measure import hit_tokens
from prefixscope.stages import ingest

SAMPLE = Path(__file__).resolve().parents[1] / "data/sample/mooncake/conversation_trace.jsonl.gz"
BLOCK = 512
FAMILIES, ZIPF, CONCURRENT, TURNS, PER_TURN = 2_000, 1.1, 2_000, 8, 3
CHUNK_REQUESTS = 1 << 16
HEADS = (0, 1)  # block sampling plain, and with the first block of each request kept whole


def best(fn, repeats: int = 3) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


# --- traces -----------------------------------------------------------------------------------


def bundled() -> Trace:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        ingest.ingest_logs(path, ingest.IngestSettings((str(SAMPLE),)))
        with warehouse.reading(path) as con:
            trace = load_trace(con)
    return trace


def tiled(base: Trace, lookups: int) -> Trace:
    """``base`` repeated with shifted ids until it has ``lookups`` block lookups."""
    copies = -(-lookups // base.n_lookups)
    values = base.hashes[base.blocks]
    all_values = np.concatenate([values + np.uint64(k << 32) for k in range(copies)])
    offsets = np.concatenate(
        [base.offsets[:-1] + k * base.n_lookups for k in range(copies)]
        + [[copies * base.n_lookups]]
    )
    lists = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(all_values))
    n = len(offsets) - 1
    return build_trace(lists, np.tile(base.input_tokens, copies), ["t"] * n, base.block_size)


def synthetic_batches(lookups: int) -> Iterator[pa.RecordBatch]:
    """The synthetic trace, in record batches of about ``CHUNK_REQUESTS`` requests, until it
    holds at least ``lookups`` block lookups."""
    ranks = np.arange(1, FAMILIES + 1, dtype=float) ** -ZIPF
    cdf = np.cumsum(ranks) / ranks.sum()
    fam_len = (2 + mix(np.arange(FAMILIES)) % np.uint64(15)).astype(np.int64)
    tenants = pa.array(["t0", "t1", "t2", "t3"])
    done, first = 0, 0
    while done < lookups:
        j = np.arange(first, first + CHUNK_REQUESTS, dtype=np.int64)
        wave, within = np.divmod(j, CONCURRENT * TURNS)
        turn, slot = np.divmod(within, CONCURRENT)
        session = wave * CONCURRENT + slot
        u = mix(session.astype(np.uint64))
        private = (u & np.uint64(1)) == 1
        family = np.searchsorted(cdf, (u >> np.uint64(11)).astype(float) / 2.0**53)
        family = np.minimum(family, FAMILIES - 1)
        prefix = np.where(private, 0, fam_len[family])
        n = prefix + PER_TURN * (turn + 1)
        offsets = np.concatenate(([0], np.cumsum(n)))
        req = np.repeat(np.arange(len(j)), n)
        pos = np.arange(offsets[-1]) - offsets[req]
        in_family = pos < prefix[req]
        fam_id = (np.uint64(1) << np.uint64(60)) | (family[req].astype(np.uint64) << np.uint64(8))
        ses_id = (np.uint64(2) << np.uint64(60)) | (session[req].astype(np.uint64) << np.uint64(12))
        blocks = np.where(
            in_family,
            fam_id + pos.astype(np.uint64),
            ses_id + (pos - prefix[req]).astype(np.uint64),
        )
        yield pa.RecordBatch.from_arrays(
            [
                pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), pa.array(blocks)),
                pa.array(n * BLOCK - (j % 256)),
                pa.DictionaryArray.from_arrays(
                    pa.array((u >> np.uint64(1) & np.uint64(3)).astype(np.int8)), tenants
                ),
                pa.array(j * 0.01),
            ],
            names=["block_hashes", "input_tokens", "tenant", "t"],
        )
        done += int(offsets[-1])
        first += len(j)


def synthetic(lookups: int) -> Trace:
    return sample_batches(synthetic_batches(lookups), 1.0, BLOCK)


# --- measurements -----------------------------------------------------------------------------


def fleet_hits(trace: Trace, points: np.ndarray) -> np.ndarray:
    curve = lru_curve(trace, points, ["all"])
    return next(g for g in curve.groups if g.tenant == "*").hit_tokens


def speed(trace: Trace, name: str) -> None:
    points = capacity_points(trace.n_unique, 256)
    lru = POLICIES["lru"]
    lru.hit_blocks(trace, 100_000)  # compile, or load the cached machine code
    fleet_hits(trace, points)
    # Interleaved, so both see the same machine (it is shared): best of each.
    repeats = 7 if trace.n_lookups > 10_000_000 else 25
    t_curve, t_one, t_ws = np.inf, np.inf, np.inf
    for _ in range(repeats):
        t_curve = min(t_curve, best(lambda: fleet_hits(trace, points), 1)[0])
        t_one = min(t_one, best(lambda: lru.hit_blocks(trace, 100_000), 1)[0])
        t_ws = min(t_ws, best(lambda: lru.hit_blocks(trace, trace.n_unique), 1)[0])
    thirty = np.unique(np.round(np.geomspace(100, trace.n_unique, 30)).astype(np.int64))
    t = time.perf_counter()
    per_capacity = [int(hit_tokens(trace, lru.hit_blocks(trace, int(c))).sum()) for c in thirty]
    t_thirty = time.perf_counter() - t
    same = fleet_hits(trace, np.asarray(thirty)).tolist() == per_capacity
    print(
        f"{name}: {trace.n_requests:,} requests, {trace.n_lookups:,} lookups, "
        f"{trace.n_unique:,} distinct blocks"
    )
    print(
        f"  exact curve, {len(points)} capacities, 1 .. {trace.n_unique:,} blocks: "
        f"{t_curve:.4f} s (best of {repeats}), {trace.n_lookups / t_curve / 1e6:.0f} M lookups/s"
    )
    print(
        f"  one lru run @ 100,000 blocks: {t_one:.4f} s  -> curve / run = {t_curve / t_one:.2f}x"
        f"   (@ the working set: {t_ws:.4f} s -> {t_curve / t_ws:.2f}x)"
    )
    print(
        f"  30 lru runs, one per capacity: {t_thirty:.2f} s  -> {t_thirty / t_curve:.1f}x the "
        f"curve; the curve equals all 30 to the token: {same}"
    )


def exact_at(trace: Trace, small: np.ndarray, rate: float) -> np.ndarray:
    """The exact fleet token hit rate at the full-scale capacities of sampled ones."""
    full = np.maximum(1, np.round(small / rate).astype(np.int64))
    axis = np.unique(full)
    return fleet_hits(trace, axis)[np.searchsorted(axis, full)] / trace.input_tokens.sum()


def errors(err: np.ndarray) -> str:
    return f"mean {err.mean():.4f}, max {err.max():.4f}" if len(err) else "—"


def sampling_error(trace: Trace, name: str) -> None:
    # A block is in or out of a block sample whole: the heaviest one bounds how coarse it is.
    tokens = np.bincount(trace.blocks, weights=trace.token_sizes, minlength=trace.n_unique)
    heavy = int(np.argmax(tokens))
    print(
        f"  {name}: the heaviest block holds {tokens[heavy] / trace.input_tokens.sum():.4f} of "
        f"the input tokens; in the sample at 0.1: {bool(keep(trace.hashes[[heavy]], 0.1)[0])}, "
        f"at 0.01: {bool(keep(trace.hashes[[heavy]], 0.01)[0])}"
    )
    for rate in (0.1, 0.01):
        for head in HEADS:
            block_error(trace, name, rate, head)
        try:
            family = sample_trace(trace, rate)
        except ValueError as exc:
            print(f"  {name} @ {rate}, family: no estimate ({exc})")
            continue
        small = capacity_points(family.n_unique, 256)
        est = fleet_hits(family, small) / family.input_tokens.sum()
        err = np.abs(est - exact_at(trace, small, rate))
        print(
            f"  {name} @ {rate}, family: kept {family.n_requests:,} of {trace.n_requests:,} "
            f"requests ({family.n_requests / trace.n_requests:.3f}), {family.n_lookups:,} "
            f"lookups; {len(small)} capacities: {errors(err)}"
        )


def block_error(trace: Trace, name: str, rate: float, head: int) -> None:
    sample = sample_blocks(trace, rate, head)
    small = capacity_points(sample.trace.n_unique, 256)
    exact = exact_at(trace, small, rate)
    fleet = next(s for s in sampled_sums(sample, small, ["all"]) if s.tenant == "*")
    print(
        f"  {name} @ {rate}, block, head {head}: kept {sample.trace.n_lookups:,} of "
        f"{trace.n_lookups:,} lookups ({sample.trace.n_lookups / trace.n_lookups:.3f}), "
        f"{sample.trace.n_unique:,} blocks; {len(small)} capacities"
    )
    big = small >= 100
    for estimator in ESTIMATORS:
        err = np.abs(estimates(fleet, rate, estimator) / fleet.input_tokens - exact)
        print(
            f"    {estimator:>6}: {errors(err)}; sampled capacity >= 100 blocks "
            f"({big.sum()}): {errors(err[big])}; below ({(~big).sum()}): {errors(err[~big])}"
        )


def large(lookups: int, rate: float, by: str) -> None:
    """Runs in its own process: the sampled curve of a trace that is never held whole."""
    t = time.perf_counter()
    if by.startswith("block"):
        head = int(by.partition(":")[2] or 0)
        sample = sample_block_batches(synthetic_batches(lookups), rate, BLOCK, head)
        t_sample = time.perf_counter() - t
        kept = sample.trace.n_lookups
        sampled_sums(sample, capacity_points(sample.trace.n_unique, 256), ["all"])
    else:
        family = sample_batches(synthetic_batches(lookups), rate, BLOCK)
        t_sample = time.perf_counter() - t
        kept = family.n_lookups
        lru_curve(family, capacity_points(family.n_unique, 256), ["all"])
    total = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(
        f"  {by} sample @ {rate}: {total:.1f} s on one core ({t_sample:.1f} s generating and "
        f"sampling the stream, the rest the curve of {kept:,} kept lookups); "
        f"peak RSS {peak:.2f} GiB"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--large":
        large(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return
    base = bundled()
    if len(sys.argv) > 1 and sys.argv[1] == "--sampling":  # sections 2 and 3 only
        sampling(base)
        return
    print("== exact curve: speed ==")
    speed(base, "bundled trace")
    speed(tiled(base, 25_000_000), "bundled trace tiled to 25 M lookups")
    sampling(base)


def sampling(base: Trace) -> None:
    print("== sampling error against the exact curve (fleet, window all) ==")
    sampling_error(synthetic(25_000_000), "synthetic, 25 M lookups")
    sampling_error(base, "bundled trace")
    print("== sampled curve of 250 M lookups (a fresh process) ==")
    for by in ("block", *(f"block:{h}" for h in HEADS if h), "family"):
        subprocess.run([sys.executable, __file__, "--large", "250000000", "0.01", by], check=True)


if __name__ == "__main__":
    main()

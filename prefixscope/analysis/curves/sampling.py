"""Spatial sampling of prefix families, in the spirit of SHARDS (Waldspurger et al., FAST'15).

SHARDS keeps the references to a hashed subset of the keys and scales the cache by the sampling
rate. ``block_sampling.py`` does that with blocks, for the LRU curve (a stack algorithm: a sampled
block's depth among sampled blocks decides its hit). Replaying a sample through the simulator
(any policy) needs a trace of whole requests instead, so this sampler keeps whole *prefix
families*. Block hashes are chained, so two requests that share any block share their first
block: the first block names the family, and a request is kept iff
``mix(first block hash) mod 2**24 < rate * 2**24``. A family is kept or dropped whole, so the
sampled trace shares blocks exactly as the full one does, within the families it keeps.

(Sampling by session would not do: sessions that share a system prompt share blocks across
sessions, and keeping some of them but not others would cut that sharing apart.)

A request without a block (a prompt shorter than one block of a token source) belongs to no
family; it is kept by a hash of its position, at the same rate: it never hits, but its tokens
count in the denominator.
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope.analysis.trace.csr import Trace, build_trace
from prefixscope.analysis.trace.load import block_size_of, replay_relation, trace_from_table

#: Resolution of the sampling threshold: rates are multiples of 2**-24.
SCALE_BITS = 24
BATCH_ROWS = 1 << 18


def mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 (one step and its finalizer): a bijection of uint64 whose high bits look
    random even for sequential inputs (Mooncake hash ids are small consecutive integers)."""
    z = np.asarray(values, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)  # splitmix64's step: else 0 would map to 0, always kept
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


#: The most a drawn rate (``threshold / 2**24``) may differ from the rate asked for: capacities
#: are scaled by the rate asked for, so a coarser draw would misplace every point.
RATE_TOLERANCE = 0.01
#: The smallest rate drawn to within that tolerance (about 3e-6).
MIN_RATE = 1 / (2 * RATE_TOLERANCE) / (1 << SCALE_BITS)


def threshold(rate: float) -> int:
    """The sample's threshold on the top 24 bits of a mixed hash: a key is kept with
    probability ``threshold / 2**24``, within :data:`RATE_TOLERANCE` of ``rate``."""
    if not 0 < rate <= 1:
        raise ValueError(f"a sample rate is in (0, 1], got {rate}")
    if rate < MIN_RATE:
        raise ValueError(
            f"a sample rate of {rate:g} cannot be drawn: hashes are sampled in steps of 2**-24, "
            f"so rates below {MIN_RATE:.1e} are off by more than {RATE_TOLERANCE:.0%} — give "
            f"--sample-rate {MIN_RATE:.0e} or more"
        )
    return round(rate * (1 << SCALE_BITS))


def keep(first_hashes: np.ndarray, rate: float) -> np.ndarray:
    """Whether a family (named by its first block hash) is in the sample."""
    return keep_mixed(mix(first_hashes), rate)


def keep_mixed(mixed: np.ndarray, rate: float) -> np.ndarray:
    """:func:`keep` of keys already through :func:`mix`."""
    return (mixed >> np.uint64(64 - SCALE_BITS)) < np.uint64(threshold(rate))


def family_keys(offsets: np.ndarray, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Per request of a CSR list (``values[offsets[i]:offsets[i+1]]``, block hashes), the key
    it is sampled by: its first block hash; for a request with no block, its replay position,
    spread by an odd constant (were it to equal some family's key, it would share that
    family's fate, which biases nothing)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    has_block = offsets[1:] > offsets[:-1]
    key = np.asarray(positions, dtype=np.uint64) * np.uint64(0x4F1BBCDCBFA53E0B)
    key[has_block] = np.asarray(values, dtype=np.uint64)[offsets[:-1][has_block]]
    return key


def sample_trace(trace: Trace, rate: float) -> Trace:
    """The requests of ``trace`` whose family is in the sample, with their own dense ids."""
    if rate == 1:
        return trace
    values = trace.hashes[trace.blocks]
    kept = keep(family_keys(trace.offsets, values, np.arange(trace.n_requests)), rate)
    if not kept.any():
        raise ValueError(f"a sample at rate {rate} keeps no request: raise the rate")
    sizes = trace.blocks_per_request[kept]
    hashes = pa.LargeListArray.from_arrays(
        pa.array(np.concatenate(([0], np.cumsum(sizes))), pa.int64()),
        pa.array(values[np.repeat(kept, trace.blocks_per_request)], pa.uint64()),
    )
    tenants = np.asarray(trace.tenants, dtype=object)[trace.tenant_codes[kept]]
    sessions = None
    if trace.sessions is not None:  # the session-aware policies read them (a code: its name)
        codes = trace.sessions[kept]
        sessions = pa.array(codes.astype(np.int64), mask=codes < 0).cast(pa.string())
    return build_trace(
        hashes,
        trace.input_tokens[kept],
        tenants,
        trace.block_size,
        trace.times[kept],
        sessions=sessions,
    )


def sample_batches(batches: Iterable[pa.RecordBatch], rate: float, block_size: int) -> Trace:
    """Stream record batches (``block_hashes``, ``input_tokens``, ``tenant``, ``t`` seconds and
    optionally ``session``, in replay order) through the sampler and build a trace of what it
    keeps: only the sample is ever held in memory, so a fleet-scale trace never has to fit."""
    kept: list[pa.RecordBatch] = []
    seen = 0
    for batch in batches:
        positions = np.arange(seen, seen + batch.num_rows, dtype=np.int64)
        seen += batch.num_rows
        lists = batch.column("block_hashes")
        offsets = np.asarray(lists.offsets, dtype=np.int64)
        values = np.asarray(lists.values, dtype=np.uint64)
        mask = keep(family_keys(offsets - offsets[0], values[offsets[0] :], positions), rate)
        if mask.any():
            kept.append(batch.filter(pa.array(mask)))
    if not kept:
        raise ValueError(f"a sample at rate {rate} keeps no request: raise the rate")
    return trace_from_table(pa.Table.from_batches(kept), block_size)


def load_sampled_trace(con: duckdb.DuckDBPyConnection, rate: float) -> Trace:
    """The warehouse's trace, sampled as it streams out of DuckDB."""
    block_size = block_size_of(con)
    columns = replay_relation(con).select("block_hashes, input_tokens, tenant, t, session")
    reader = columns.to_arrow_reader(BATCH_ROWS)
    return sample_batches(reader, rate, block_size)

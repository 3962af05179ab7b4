"""Spatial sampling of blocks for the LRU curve: SHARDS (Waldspurger et al., FAST'15).

Every reference to a block is kept iff ``mix(block hash) mod 2**24 < rate * 2**24``, so a block
is kept or dropped for all of its references and the sample reuses blocks exactly as the full
trace does. Each request keeps its sampled blocks in their order (the curve's kernel touches
them deepest first, as the full replay does), so the sampled LRU stack is the full stack with
the unsampled blocks left out: a sampled block's depth among sampled blocks counts the sampled
ones among the ``d`` blocks above it, about ``rate * d``. A cache of ``rate * C`` blocks of the
sample therefore stands for a cache of ``C`` blocks of the full trace.

*Heads.* A block that starts many requests (a fleet-wide system prompt) carries a large share of
the tokens, and a block is in or out of a hashed sample whole: one such block outside the sample
moves the estimate by its whole share at every capacity. With ``head = P`` the blocks at the first
``P`` positions of a request are kept whole (at rate 1, every reference) and the others at
``rate``. With chained hashes (as the warehouse stores them) a block's position in its request is
fixed, so "at position < P" is a property of the block and each block is still kept for all its
references or none. The head blocks are an exactly tracked set in the spirit of SHARDS's hot keys,
but chosen by position, which a stream knows at once: the hottest block of a chained trace is
always a first block (every request that looks up a block looks up its ancestors).

Every request stays in the sample, even one none of whose blocks is kept: windows are by
position in the full replay, and each group's request and token counts are the full trace's.
Only the lookups are sampled, so a fleet-scale trace never has to fit; the per-request arrays
that do are a few tens of bytes a request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.analysis.curves.sampling import BATCH_ROWS, keep
from prefixscope.analysis.trace.csr import Trace, block_tokens
from prefixscope.analysis.trace.load import block_size_of, replay_relation


@dataclass(frozen=True, eq=False)
class BlockSample:
    """A block sample of a trace. ``trace`` holds every request in replay order, each looking
    up only its sampled blocks (dense ids over the sampled blocks), with its full input tokens;
    ``lookup_tokens[p]`` is what lookup ``p`` weighs in its full request (the simulator's rule
    at the block's own position); ``covered_tokens[r]`` is what all of request ``r``'s blocks
    hold, sampled or not (its input tokens beyond its last block never hit)."""

    trace: Trace
    lookup_tokens: np.ndarray  # int32, one per sampled lookup
    covered_tokens: np.ndarray  # int64, one per request
    rate: float
    head: int = 0  # the blocks at positions < head are kept whole
    kept_whole: np.ndarray | None = None  # bool, one per sampled lookup (None: head == 0)


@dataclass
class _Parts:
    """What the sampler keeps of each batch, concatenated at the end."""

    counts: list[np.ndarray]
    values: list[np.ndarray]
    lookup_tokens: list[np.ndarray]
    covered: list[np.ndarray]
    input_tokens: list[np.ndarray]
    tenant_codes: list[np.ndarray]
    times: list[np.ndarray]
    kept_whole: list[np.ndarray]


def sample_lists(
    offsets: np.ndarray,
    values: np.ndarray,
    input_tokens: np.ndarray,
    block_size: int,
    rate: float,
    head: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of a CSR list of requests (``values[offsets[i]:offsets[i+1]]``, block hashes): per
    request the number of sampled blocks, the sampled hashes in order, the tokens each holds,
    per request the tokens all its blocks hold, and per sampled block whether it is kept whole
    (its position is below ``head``)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint64)[offsets[0] : offsets[-1]]
    offsets = offsets - offsets[0]
    input_tokens = np.asarray(input_tokens, dtype=np.int64)
    chosen = keep(values, rate)
    if head:  # the first `head` lookups of each request, kept whole
        sizes = np.diff(offsets)
        firsts = np.repeat(offsets[:-1], np.minimum(sizes, head))
        chosen[firsts + _ranks(np.minimum(sizes, head))] = True
    kept = np.flatnonzero(chosen)
    request = np.searchsorted(offsets, kept, side="right") - 1
    position = kept - offsets[request]
    tokens = block_tokens(input_tokens[request], position, block_size)
    counts = np.bincount(request, minlength=len(input_tokens))
    covered = np.clip(np.minimum(np.diff(offsets) * block_size, input_tokens), 0, None)
    return counts, values[kept], tokens.astype(np.int32), covered, position < head


def _ranks(sizes: np.ndarray) -> np.ndarray:
    """``0 .. sizes[i]-1`` for each ``i``, concatenated."""
    ends = np.cumsum(sizes)
    return np.arange(ends[-1] if len(ends) else 0) - np.repeat(ends - sizes, sizes)


def _tenant_codes(column: pa.Array, names: dict[str, int]) -> np.ndarray:
    """Codes of a tenant column in ``names`` (extended with the names it has not seen)."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    lut = [names.setdefault(str(v), len(names)) for v in column.dictionary.to_pylist()]
    return np.asarray(lut, np.int32)[column.indices.to_numpy(zero_copy_only=False)]


def sample_block_batches(
    batches: Iterable[pa.RecordBatch], rate: float, block_size: int, head: int = 0
) -> BlockSample:
    """Stream record batches (``block_hashes``, ``input_tokens``, ``tenant``, ``t`` seconds, in
    replay order) through the block sampler."""
    parts = _Parts([], [], [], [], [], [], [], [])
    names: dict[str, int] = {}
    for batch in batches:
        lists = batch.column("block_hashes")
        inp = np.asarray(batch.column("input_tokens").to_numpy(), dtype=np.int64)
        counts, values, tokens, covered, whole = sample_lists(
            np.asarray(lists.offsets, dtype=np.int64),
            np.asarray(lists.values, dtype=np.uint64),
            inp,
            block_size,
            rate,
            head,
        )
        parts.counts.append(counts)
        parts.values.append(values)
        parts.lookup_tokens.append(tokens)
        parts.covered.append(covered)
        parts.kept_whole.append(whole)
        parts.input_tokens.append(inp)
        parts.tenant_codes.append(_tenant_codes(batch.column("tenant"), names))
        parts.times.append(np.asarray(batch.column("t").to_numpy(), dtype=np.float64))
    return _assemble(parts, names, block_size, rate, head)


def _assemble(
    parts: _Parts, names: dict[str, int], block_size: int, rate: float, head: int
) -> BlockSample:
    def cat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)

    counts = cat(parts.counts, np.int64)
    values = cat(parts.values, np.uint64)
    hashes, dense = np.unique(values, return_inverse=True)
    order = sorted(names, key=str)  # tenants sorted by name, as a loaded trace has them
    remap = np.empty(len(names), np.int32)
    remap[[names[n] for n in order]] = np.arange(len(order), dtype=np.int32)
    times = cat(parts.times, np.float64)
    if len(times) and np.any(np.diff(times) < 0):
        raise ValueError("times must not decrease: requests are in replay order")
    trace = Trace(
        block_size=int(block_size),
        offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        blocks=dense.astype(np.int32).ravel(),
        input_tokens=cat(parts.input_tokens, np.int64),
        tenant_codes=remap[cat(parts.tenant_codes, np.int32)],
        tenants=tuple(order),
        n_unique=len(hashes),
        times=times - times[0] if len(times) else times,
        hashes=hashes,
        start_s=float(times[0]) if len(times) else 0.0,
    )
    return BlockSample(
        trace,
        cat(parts.lookup_tokens, np.int32),
        cat(parts.covered, np.int64),
        rate,
        head,
        cat(parts.kept_whole, np.bool_) if head else None,
    )


def sample_blocks(trace: Trace, rate: float, head: int = 0) -> BlockSample:
    """The block sample of a trace already in memory (the same as streaming it)."""
    batch = pa.RecordBatch.from_arrays(
        [
            pa.LargeListArray.from_arrays(
                pa.array(trace.offsets, pa.int64()), pa.array(trace.hashes[trace.blocks])
            ),
            pa.array(trace.input_tokens),
            pa.DictionaryArray.from_arrays(
                pa.array(trace.tenant_codes), pa.array(list(trace.tenants), pa.string())
            ),
            pa.array(trace.times + trace.start_s),
        ],
        names=["block_hashes", "input_tokens", "tenant", "t"],
    )
    return sample_block_batches([batch], rate, trace.block_size, head)


def load_block_sample(con: duckdb.DuckDBPyConnection, rate: float, head: int = 0) -> BlockSample:
    """The warehouse's trace, block-sampled as it streams out of DuckDB."""
    block_size = block_size_of(con)
    columns = replay_relation(con).select("block_hashes, input_tokens, tenant, t")
    reader = columns.to_arrow_reader(BATCH_ROWS)
    return sample_block_batches(reader, rate, block_size, head)

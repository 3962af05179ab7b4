"""Spatial sampling of blocks for the LRU curve: SHARDS (Waldspurger et al., FAST'15).

Every reference to a block is kept iff ``mix(block hash) mod 2**24 < rate * 2**24``, so a block
is kept or dropped for all of its references and the sample reuses blocks exactly as the full
trace does. Each request keeps its sampled blocks in their order (the curve's kernel touches
them deepest first, as the full replay does), so the sampled LRU stack is the full stack with
the unsampled blocks left out: a sampled block's depth among sampled blocks counts the sampled
ones among the ``d`` blocks above it, about ``rate * d``. A cache of ``rate * C`` blocks of the
sample therefore stands for a cache of ``C`` blocks of the full trace.

*Blocks kept whole.* A block that many requests look up (a fleet-wide system prompt) carries a
large share of the tokens, and a block is in or out of a hashed sample whole: one such block
outside the sample moves the estimate by its whole share at every capacity, and one inside it
weighs ``1 / rate`` times its share. So a sample may keep a set of blocks *whole* (at rate 1, every
reference, their hits known exactly) and the others at ``rate``; any set decided by the block
alone keeps each block in for all its references or none. Two rules choose the set:

- *hot* (``hot``, the default ``block-hot``): the blocks with at least :data:`HOT_SHARE` of the
  sample's expected lookups (``rate`` × the trace's lookups), and at least 2. So no block outside
  the set weighs more than about a thousandth of the sample, wherever it sits in its requests: a
  shared root, or every block of a long shared system prompt. The stream is read twice: a first
  pass counts lookups per bucket of the mixed hash (:func:`hot_blocks`; 2**22 buckets, a
  count-min sketch of one row), and a block is kept whole when its bucket holds at least the
  threshold. A bucket never counts fewer lookups than any of its blocks, so every block at the
  threshold is found; a colder block that shares a bucket with one is kept whole too, which only
  adds an exactly tracked block. On a trace with no block that hot, the sample is plain.
- *heads* (``head = P``, ``block-head``): the blocks at the first ``P`` positions of a request.
  With chained hashes (as the warehouse stores them) a block's position in its request is fixed,
  so "at position < P" is a property of the block. It needs one pass, and covers the hottest
  block of a chained trace (always a first block: every request that looks up a block looks up
  its ancestors), but not a hot block deeper in its requests, and it keeps every first block,
  however cold.

Every request stays in the sample, even one none of whose blocks is kept: windows are by
position in the full replay, and each group's request and token counts are the full trace's.
Only the lookups are sampled, so a fleet-scale trace never has to fit; the per-request arrays
that do are a few tens of bytes a request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.analysis.curves.sampling import BATCH_ROWS, keep_mixed, mix
from prefixscope.analysis.trace.csr import Trace, block_tokens
from prefixscope.analysis.trace.load import block_size_of, replay_relation

#: ``block-hot``: a block is kept whole when it holds at least this share of the sample's
#: expected lookups: it would move the estimate by up to about this much on its own.
HOT_SHARE = 1e-3
#: Lookups are counted per bucket of ``mix(hash) mod 2**HOT_BITS`` (32 MiB of counts).
HOT_BITS = 22


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
    kept_whole: np.ndarray | None = None  # bool, one per sampled lookup (None: none kept whole)
    hot_threshold: int = 0  # the blocks of a bucket with this many lookups are kept whole (0: no)


@dataclass(frozen=True, eq=False)
class HotBlocks:
    """The blocks a ``block-hot`` sample keeps whole: those whose bucket holds at least
    ``threshold`` lookups (``buckets``: bool, one per bucket)."""

    threshold: int
    buckets: np.ndarray

    def whole(self, mixed: np.ndarray) -> np.ndarray:
        """Of hashes through ``mix``: whether each is kept whole."""
        return self.buckets[_bucket(mixed)]


def hot_threshold(lookups: int, rate: float) -> int:
    """Lookups that make a block hot in a trace of ``lookups`` sampled at ``rate``."""
    return max(2, math.ceil(HOT_SHARE * rate * lookups))


def hot_blocks(batches: Iterable[pa.RecordBatch], rate: float) -> HotBlocks:
    """The first pass of a ``block-hot`` sample: lookups per bucket over the whole stream
    (record batches with ``block_hashes``, in any order), and the buckets at the threshold."""
    counts = np.zeros(1 << HOT_BITS, np.int64)
    lookups = 0
    for batch in batches:
        lists = batch.column("block_hashes")
        offsets = np.asarray(lists.offsets, dtype=np.int64)
        values = np.asarray(lists.values, dtype=np.uint64)[offsets[0] : offsets[-1]]
        counts += np.bincount(_bucket(mix(values)), minlength=len(counts))
        lookups += len(values)
    threshold = hot_threshold(lookups, rate)
    return HotBlocks(threshold, counts >= threshold)


def _bucket(mixed: np.ndarray) -> np.ndarray:
    # The low bits: the sample's own choice (``keep_mixed``) reads the high ones.
    return (mixed & np.uint64((1 << HOT_BITS) - 1)).astype(np.intp)


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
    hot: HotBlocks | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of a CSR list of requests (``values[offsets[i]:offsets[i+1]]``, block hashes): per
    request the number of sampled blocks, the sampled hashes in order, the tokens each holds,
    per request the tokens all its blocks hold, and per sampled block whether it is kept whole
    (its position is below ``head``, or ``hot`` names it)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    values = np.asarray(values, dtype=np.uint64)[offsets[0] : offsets[-1]]
    offsets = offsets - offsets[0]
    input_tokens = np.asarray(input_tokens, dtype=np.int64)
    mixed = mix(values)
    whole = hot.whole(mixed) if hot is not None else np.zeros(len(values), np.bool_)
    if head:  # the first `head` lookups of each request
        sizes = np.minimum(np.diff(offsets), head)
        whole[np.repeat(offsets[:-1], sizes) + _ranks(sizes)] = True
    kept = np.flatnonzero(keep_mixed(mixed, rate) | whole)
    request = np.searchsorted(offsets, kept, side="right") - 1
    position = kept - offsets[request]
    tokens = block_tokens(input_tokens[request], position, block_size)
    counts = np.bincount(request, minlength=len(input_tokens))
    covered = np.clip(np.minimum(np.diff(offsets) * block_size, input_tokens), 0, None)
    return counts, values[kept], tokens.astype(np.int32), covered, whole[kept]


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
    batches: Iterable[pa.RecordBatch],
    rate: float,
    block_size: int,
    head: int = 0,
    hot: HotBlocks | None = None,
) -> BlockSample:
    """Stream record batches (``block_hashes``, ``input_tokens``, ``tenant``, ``t`` seconds, in
    replay order) through the block sampler; ``hot``: from a first pass over the same stream
    (:func:`hot_blocks`)."""
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
            hot,
        )
        parts.counts.append(counts)
        parts.values.append(values)
        parts.lookup_tokens.append(tokens)
        parts.covered.append(covered)
        parts.kept_whole.append(whole)
        parts.input_tokens.append(inp)
        parts.tenant_codes.append(_tenant_codes(batch.column("tenant"), names))
        parts.times.append(np.asarray(batch.column("t").to_numpy(), dtype=np.float64))
    return _assemble(parts, names, block_size, rate, head, hot)


def _assemble(
    parts: _Parts,
    names: dict[str, int],
    block_size: int,
    rate: float,
    head: int,
    hot: HotBlocks | None,
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
        head=head,
        kept_whole=cat(parts.kept_whole, np.bool_) if head or hot else None,
        hot_threshold=hot.threshold if hot else 0,
    )


def sample_blocks(trace: Trace, rate: float, head: int = 0, hot: bool = False) -> BlockSample:
    """The block sample of a trace already in memory (the same as streaming it); ``hot``: keep
    the hot blocks whole."""
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
    found = hot_blocks([batch], rate) if hot else None
    return sample_block_batches([batch], rate, trace.block_size, head, found)


def load_block_sample(
    con: duckdb.DuckDBPyConnection, rate: float, head: int = 0, hot: bool = False
) -> BlockSample:
    """The warehouse's trace, block-sampled as it streams out of DuckDB (twice with ``hot``:
    a first pass finds the hot blocks)."""
    block_size = block_size_of(con)
    found = None
    if hot:
        hashes = replay_relation(con).select("block_hashes")
        found = hot_blocks(hashes.to_arrow_reader(BATCH_ROWS), rate)
    columns = replay_relation(con).select("block_hashes, input_tokens, tenant, t")
    reader = columns.to_arrow_reader(BATCH_ROWS)
    return sample_block_batches(reader, rate, block_size, head, found)

"""A trace: requests in replay order, with blocks as dense integer ids (CSR arrays).

Simulators work on flat integer arrays (CSR layout), never on Python lists of hashes: the
64-bit block hashes are mapped to ``0 .. n_unique-1`` once, so a cache is a few numpy arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests in replay order. Request ``i`` looks up ``blocks[offsets[i]:offsets[i+1]]``,
    shallowest block first (none, for a prompt shorter than one full block of a token source)."""

    block_size: int
    offsets: np.ndarray  # int64, n_requests + 1
    blocks: np.ndarray  # int32 dense block ids
    input_tokens: np.ndarray  # int64, n_requests
    tenant_codes: np.ndarray  # int32, n_requests; index into `tenants`
    tenants: tuple[str, ...]
    n_unique: int
    times: np.ndarray  # float64 seconds since the first arrival, n_requests, non-decreasing
    hashes: np.ndarray  # uint64: the block hash of each dense id
    request_ids: pa.Array | None = None  # warehouse request ids (Arrow strings), when loaded
    start_s: float = 0.0  # epoch seconds of the first arrival (times count from it)
    #: bool per request: the engine always computes the prompt's last token (vLLM's rule, for
    #: token sources); None: never (hash-id traces). See :attr:`recomputes_last_block`.
    last_token_rule: np.ndarray | None = None
    #: int32 per request: the session it belongs to (codes of (tenant, session id) pairs), -1
    #: where the log names none; None: no request names one. Read by the session-aware
    #: policies (``policies/sessions.py``).
    sessions: np.ndarray | None = None

    @property
    def n_requests(self) -> int:
        return len(self.input_tokens)

    @property
    def n_lookups(self) -> int:
        return len(self.blocks)

    @property
    def blocks_per_request(self) -> np.ndarray:
        return np.diff(self.offsets)

    def warm(self) -> Trace:
        """Compute the derived arrays the simulators read, now: before a process pool forks,
        so that its workers share them with this process instead of each building its own.
        The request of every lookup and the tokens each serves are left to the analyses that
        read them (a gigabyte each at 250 M lookups that no replay reads)."""
        for name in ("parent", "servable_tokens"):
            getattr(self, name)
        return self

    @cached_property
    def request_of_lookup(self) -> np.ndarray:
        """The request index of every lookup (n_lookups; int32 below 2**31 requests: at 250 M
        lookups it so holds 1 GB, not 2)."""
        kind = np.int32 if self.n_requests < 2**31 else np.int64
        return np.repeat(np.arange(self.n_requests, dtype=kind), self.blocks_per_request)

    @cached_property
    def first_lookup(self) -> np.ndarray:
        """Per dense id, the index of its first lookup (n_unique; int32 below 2**31 lookups;
        every id is looked up).
        One pass, shared by every analysis that asks when a block was first seen."""
        kind = np.int32 if self.n_lookups < 2**31 else np.int64
        return _first_lookup(self.blocks, np.full(self.n_unique, -1, kind))

    @cached_property
    def parent(self) -> np.ndarray:
        """Per dense id, the block before it at its first lookup (-1 for a first block). With
        prefix-chained hashes this is the block's one and only parent."""
        return _parents(self.offsets, self.blocks, np.full(self.n_unique, _UNSEEN, np.int32))

    @cached_property
    def next_use(self) -> np.ndarray:
        """Per lookup, the next request (after this one) that looks up the same block;
        ``n_requests`` when there is none (n_lookups; int32 below 2**31 requests). One
        compiled backward scan, shared by every ``belady`` replay of the trace."""
        kind = np.int32 if self.n_requests < 2**31 else np.int64
        later = np.full(self.n_unique, self.n_requests, kind)
        return _next_uses(self.offsets, self.blocks, later, np.empty(self.n_lookups, kind))

    def forget(self, *names: str) -> None:
        """Drop derived arrays (cached properties) no longer needed here, to give their memory
        back; asked for again, they are computed again."""
        for name in names:
            self.__dict__.pop(name, None)

    @cached_property
    def recomputes_last_block(self) -> np.ndarray:
        """Per request: its last block is recomputed even when cached. vLLM always computes a
        prompt's last token, so for a token source a whole-block prompt (``input_tokens ==
        blocks × block_size``) can serve at most ``blocks - 1`` blocks from cache."""
        if self.last_token_rule is None:
            return np.zeros(self.n_requests, dtype=bool)
        n = self.blocks_per_request
        return self.last_token_rule & (n > 0) & (self.input_tokens == n * self.block_size)

    @cached_property
    def servable_tokens(self) -> np.ndarray:
        """Per request, the most tokens a hit can serve: ``input_tokens``, less the last block
        where it is always recomputed. Used as the token weights of lookups (the last block of
        such a request weighs 0), so hit tokens follow the rule wherever they are summed."""
        return self.input_tokens - self.block_size * self.recomputes_last_block

    @cached_property
    def served_sizes(self) -> np.ndarray:
        """Tokens each lookup serves when it hits (int32): :attr:`token_sizes`, but 0 for a
        last block that is always recomputed (:attr:`recomputes_last_block`)."""
        # int32 (at most block_size): half the memory of int64; one compiled pass, without
        # the per-lookup positions and products (8 GB of temporaries at 250 M lookups)
        return _served(self.offsets, self.servable_tokens, self.block_size, self.n_lookups)

    @cached_property
    def token_sizes(self) -> np.ndarray:
        """Tokens each lookup's block holds: ``block_size``, less for a partial last block."""
        position = np.arange(self.n_lookups) - self.offsets[self.request_of_lookup]
        return block_tokens(self.input_tokens[self.request_of_lookup], position, self.block_size)


def block_tokens(input_tokens: np.ndarray, position: np.ndarray, block_size: int) -> np.ndarray:
    """The tokens the block at ``position`` of a request of ``input_tokens`` holds: the one
    token-per-lookup rule (``block_size``, less for a partial last block, 0 beyond the prompt);
    ``curves/stack.py`` spells the same rule in its compiled loops."""
    return np.clip(input_tokens - position * block_size, 0, block_size)


def dense_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, int32 dense id of each value). Ids that are already small integers
    (plain hash-id logs such as Mooncake's, remapped to integers from 0) are ranked by
    counting, in two passes over them and a table of the values' range, sorted; any others
    (hashes, and every keyed one) in the order of their first lookup."""
    if len(values) == 0:
        return values.copy(), np.zeros(0, np.int32)
    top = int(values.max())
    if top < _COUNTED_RANGE * len(values):
        present = np.zeros(top + 1, np.bool_)
        present[values] = True
        rank = np.cumsum(present, dtype=np.int32)
        rank -= 1
        unique = np.flatnonzero(present).astype(np.uint64)
        del present
        return unique, rank[values]
    # Numbered by first lookup, not by value: stored hashes are keyed (ingest/hashkey.py), so
    # their order is the key's, and a cache's per-block arrays are then read at random; in
    # lookup order, the blocks in use sit together and no id depends on the key. One pass
    # over an open-addressed table of first positions (4 bytes a slot, at most twice the
    # lookups), not a sort: with polars' rank the week's simulate peaked at 13.60 GB, with
    # this at 10.59 (`make bench-week`, benchmarks/RESULTS.md).
    bits = int(len(values)).bit_length()
    table = np.full(1 << bits, -1, np.int32)
    dense, n = _first_lookup_ids(values, table, bits)
    del table
    unique = np.empty(n, np.uint64)
    unique[dense] = values  # every write of an id writes its one value
    return unique, dense


@numba.njit(cache=True, nogil=True)
def _first_lookup_ids(values, table, bits):  # type: ignore[no-untyped-def]
    """Each value's id, numbered by first lookup, and how many there are: ``table`` (2**bits
    slots, more than the values, every one -1) holds, per distinct value, the position of its
    first lookup, found by linear probing from its Fibonacci hash."""
    mask = np.uint64(table.size - 1)
    shift = np.uint64(64 - bits)
    dense = np.empty(values.size, np.int32)
    n = 0
    for i in range(values.size):
        v = values[i]
        s = (v * np.uint64(0x9E3779B97F4A7C15)) >> shift
        while True:
            p = table[s]
            if p < 0:
                table[s] = i
                dense[i] = n
                n += 1
                break
            if values[p] == v:
                dense[i] = dense[p]
                break
            s = (s + np.uint64(1)) & mask
    return dense, n


#: Values below this many times their count are ranked by counting (a table of 5 bytes per
#: possible value): at most 20 bytes per lookup, against polars' sort.
_COUNTED_RANGE = 4


def tenant_codes_of(
    tenants: Sequence[str] | np.ndarray | pa.Array,
) -> tuple[np.ndarray, np.ndarray]:
    """(tenant names sorted, each row's code): ``np.unique(..., return_inverse=True)`` over the
    names, by Arrow's dictionary encoding, so millions of rows are never Python strings."""
    column = (
        tenants
        if isinstance(tenants, pa.Array)
        else pa.array(np.asarray(tenants, dtype=object).astype(str))
    )
    encoded = column.cast(pa.string()).dictionary_encode()
    names = np.asarray(encoded.dictionary.to_pylist(), dtype=object).astype(str)
    order = np.argsort(names, kind="stable")
    rank = np.empty(len(names), np.int32)
    rank[order] = np.arange(len(names), dtype=np.int32)
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    return names[order], rank[indices] if len(indices) else np.zeros(0, np.int32)


@numba.njit(cache=True, nogil=True)
def _first_lookup(
    blocks: np.ndarray, first: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    for i in range(len(blocks) - 1, -1, -1):
        first[blocks[i]] = i
    return first


#: A parent not yet set (the block not yet looked up) while :func:`_parents` runs.
_UNSEEN = -2


@numba.njit(cache=True, nogil=True)
def _parents(offsets, blocks, parent):  # type: ignore[no-untyped-def]
    """The block before each block at its first lookup (-1 at a request's start), in lookup
    order: every id is looked up, so no entry stays unseen."""
    for r in range(offsets.size - 1):
        start = offsets[r]
        for p in range(start, offsets[r + 1]):
            b = blocks[p]
            if parent[b] == _UNSEEN:
                parent[b] = blocks[p - 1] if p > start else -1
    return parent


@numba.njit(cache=True, nogil=True)
def _served(offsets, servable, block_size, n_lookups):  # type: ignore[no-untyped-def]
    """:func:`block_tokens` of every lookup over the servable tokens of its request."""
    out = np.empty(n_lookups, np.int32)
    for r in range(offsets.size - 1):
        start = offsets[r]
        for p in range(start, offsets[r + 1]):
            out[p] = min(max(servable[r] - (p - start) * block_size, 0), block_size)
    return out


@numba.njit(cache=True, nogil=True)
def _next_uses(offsets, blocks, later, out):  # type: ignore[no-untyped-def]
    """Per lookup, the next request after its own that looks up the block (``later``'s fill:
    none). Scanned from the last request back, ``later[b]`` the earliest request seen so far
    that looks up b; a request reads every lookup before it writes any, so a block repeated
    within one request is one use."""
    for r in range(offsets.size - 2, -1, -1):
        start, end = offsets[r], offsets[r + 1]
        for p in range(start, end):
            out[p] = later[blocks[p]]
        for p in range(start, end):
            later[blocks[p]] = r
    return out


def _flat(
    lists: pa.ListArray | pa.LargeListArray | pa.ChunkedArray,
) -> tuple[np.ndarray, np.ndarray]:
    """(CSR offsets, values as uint64) of hash lists; chunk by chunk into one array, so that a
    query's chunks are never first combined into a copy (2 GB at 250 M lookups)."""
    chunks = lists.chunks if isinstance(lists, pa.ChunkedArray) else [lists]
    lengths = [c.offsets[len(c)].as_py() - c.offsets[0].as_py() for c in chunks]
    offsets = np.zeros(sum(len(c) for c in chunks) + 1, np.int64)
    values = np.empty(sum(lengths), np.uint64)
    row = at = 0
    for chunk, n in zip(chunks, lengths, strict=True):
        own = np.asarray(chunk.offsets, dtype=np.int64)
        offsets[row : row + len(chunk) + 1] = own - own[0] + at
        values[at : at + n] = np.asarray(chunk.flatten(), dtype=np.uint64)
        row, at = row + len(chunk), at + n
    return offsets, values


def build_trace(
    block_hashes: pa.ListArray | pa.LargeListArray | pa.ChunkedArray | Sequence[Sequence[int]],
    input_tokens: Sequence[int] | np.ndarray,
    tenants: Sequence[str] | np.ndarray | pa.Array,
    block_size: int,
    times: Sequence[float] | np.ndarray | None = None,
    request_ids: Sequence[str] | None = None,
    last_token_rule: Sequence[bool] | np.ndarray | None = None,
    sessions: Sequence[str | None] | pa.Array | pa.ChunkedArray | None = None,
) -> Trace:
    """A trace from per-request hash lists (already in replay order); ``times`` in seconds
    (default: one request a second); ``last_token_rule``: per request, whether the engine always
    computes the last prompt token (token sources; :attr:`Trace.recomputes_last_block`);
    ``sessions``: per request, a name of its session (unique across tenants) or None."""
    if not isinstance(block_hashes, (pa.ListArray, pa.LargeListArray, pa.ChunkedArray)):
        block_hashes = pa.array(block_hashes, type=pa.list_(pa.uint64()))
    offsets, values = _flat(block_hashes)
    unique, dense = dense_ids(values)
    del values
    names, codes = tenant_codes_of(tenants)
    n = len(offsets) - 1
    t = np.arange(n, dtype=np.float64) if times is None else np.asarray(times, dtype=np.float64)
    if n and np.any(np.diff(t) < 0):
        raise ValueError("times must not decrease: requests are in replay order")
    return Trace(
        block_size=int(block_size),
        offsets=offsets,
        blocks=dense.astype(np.int32, copy=False).ravel(),
        input_tokens=np.asarray(input_tokens, dtype=np.int64),
        tenant_codes=codes.astype(np.int32).ravel(),
        tenants=tuple(str(n) for n in names),
        n_unique=len(unique),
        times=t - t[0] if n else t,
        hashes=unique,
        request_ids=None if request_ids is None else pa.array(request_ids, pa.string()),
        start_s=float(t[0]) if n else 0.0,
        last_token_rule=None
        if last_token_rule is None
        else np.asarray(last_token_rule, dtype=bool).ravel(),
        sessions=session_codes_of(sessions),
    )


def session_codes_of(
    sessions: Sequence[str | None] | pa.Array | pa.ChunkedArray | None,
) -> np.ndarray | None:
    """int32 codes of session names (-1: none); None when no request names one."""
    if sessions is None:
        return None
    array = sessions if isinstance(sessions, (pa.Array, pa.ChunkedArray)) else pa.array(
        list(sessions), pa.string()
    )
    if array.null_count == len(array):
        return None
    encoded = pc.dictionary_encode(array)
    encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    return np.asarray(encoded.indices.fill_null(-1), dtype=np.int32)

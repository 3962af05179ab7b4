"""A trace: the requests of a warehouse in replay order, with blocks as dense integer ids.

Simulators work on flat integer arrays (CSR layout), never on Python lists of hashes: the
64-bit block hashes are mapped to ``0 .. n_unique-1`` once, so a cache is a few numpy arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

#: Replay order: arrival time, ties broken by input order (file, then line).
REPLAY_ORDER = "arrival_ts, source.file, source.line"


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

    @property
    def n_requests(self) -> int:
        return len(self.input_tokens)

    @property
    def n_lookups(self) -> int:
        return len(self.blocks)

    @property
    def blocks_per_request(self) -> np.ndarray:
        return np.diff(self.offsets)


def build_trace(
    block_hashes: pa.ListArray | pa.LargeListArray | Sequence[Sequence[int]],
    input_tokens: Sequence[int] | np.ndarray,
    tenants: Sequence[str] | np.ndarray,
    block_size: int,
) -> Trace:
    """A trace from per-request hash lists (already in replay order)."""
    if not isinstance(block_hashes, (pa.ListArray, pa.LargeListArray)):
        block_hashes = pa.array(block_hashes, type=pa.list_(pa.uint64()))
    offsets = np.asarray(block_hashes.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    values = np.asarray(block_hashes.flatten(), dtype=np.uint64)
    unique, dense = np.unique(values, return_inverse=True)
    names, codes = np.unique(np.asarray(tenants, dtype=object).astype(str), return_inverse=True)
    return Trace(
        block_size=int(block_size),
        offsets=offsets,
        blocks=dense.astype(np.int32).ravel(),
        input_tokens=np.asarray(input_tokens, dtype=np.int64),
        tenant_codes=codes.astype(np.int32).ravel(),
        tenants=tuple(str(n) for n in names),
        n_unique=len(unique),
    )


def load_trace(con: duckdb.DuckDBPyConnection) -> Trace:
    """Every request of the warehouse, in replay order. One block size per trace: a cache has
    one, so a warehouse that mixes them must be split before it is simulated."""
    sizes = [r[0] for r in con.execute("SELECT DISTINCT block_size FROM requests").fetchall()]
    if not sizes:
        raise ValueError("the warehouse holds no requests: run `prefixscope ingest` first")
    if len(sizes) > 1:
        raise ValueError(f"the warehouse mixes block sizes {sorted(sizes)}; a cache has one")
    table = con.sql(
        f"SELECT tenant, input_tokens, block_hashes FROM requests ORDER BY {REPLAY_ORDER}"
    ).to_arrow_table()
    return build_trace(
        table.column("block_hashes").combine_chunks(),
        table.column("input_tokens").to_numpy(),
        table.column("tenant").to_numpy(zero_copy_only=False),
        sizes[0],
    )

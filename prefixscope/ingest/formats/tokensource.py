"""What every format that starts from token ids shares: chained hashing of full blocks, the
optional per-tenant salt, and the move to the stage schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats.base import IngestOptions, accepted_csr, conform
from prefixscope.ingest.formats.jsonfields import Field
from prefixscope.ingest.hashing import hash_token_blocks, salt_of

#: Token ids are hashed as 4-byte unsigned ints, as every tokenizer in use fits.
MAX_TOKEN_ID = 2**32 - 1


def arrival_field(options: IngestOptions) -> Field:
    """The arrival time of a token source: ``--timestamp-field``, numbers in
    ``--timestamp-unit`` after ``--start``, or ISO 8601 strings."""
    return Field(
        "arrival_us",
        options.field("timestamp", "timestamp") or "timestamp",
        "time",
        unit_us=options.unit_us,
        start_us=options.start_us,
    )


def finish_token_rows(rows: pa.Table, options: IngestOptions, block_size: int) -> pa.Table:
    """Stage rows from parsed rows that hold ``token_ids`` (list of uint64; NULL where
    rejected), ``arrival_us`` (epoch µs) and ``tenant``, plus any stage columns already named."""
    offsets, values = accepted_csr(rows, "token_ids")
    tenants = pc.fill_null(rows["tenant"], "").to_pylist()
    salts = None
    if options.salt_tenants:
        by_name = {t: salt_of(t) for t in set(tenants)}
        salts = np.array([by_name[t] for t in tenants], dtype=np.uint64)
    hash_offsets, hashes = hash_token_blocks(offsets, values, block_size, salts)
    columns = {name: rows[name] for name in rows.column_names if name in _STAGE_NAMES}
    columns.update(
        {
            "arrival_ts": pc.cast(rows["arrival_us"], pa.timestamp("us", tz="UTC")),
            "input_tokens": pa.array(np.diff(offsets), pa.int64()),
            "block_size": pa.array(np.full(rows.num_rows, block_size, np.int32)),
            "block_hashes": pa.ListArray.from_arrays(
                pa.array(hash_offsets.astype(np.int32)), pa.array(hashes, pa.uint64())
            ),
        }
    )
    return conform(pa.table(columns))


_STAGE_NAMES = {
    "line",
    "reason",
    "detail",
    "tenant",
    "session_id",
    "log_request_id",
    "output_tokens",
    "reported_cached_tokens",
    "reported_prompt_tokens",
    "reported_cache_creation_tokens",
}

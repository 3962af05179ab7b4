-- vLLM's KV cache events (ingest --format vllm-events): one row per block of each BlockStored
-- and BlockRemoved event, one row per AllBlocksCleared, in the publisher's order
-- (frame, event_index, block_index) within each capture file. ts is the engine's batch time,
-- received_ts the capture's clock when the batch arrived; rank the data-parallel rank
-- (0 where the batch names none). engine_block_hash is the engine's hash (bytes as sent; an
-- int hash as its 8-byte big-endian two's complement); engine_parent_hash the block before it
-- (stored rows only; NULL: a prompt's first block). block_id is prefixscope's chained hash of
-- the same block (requests.block_hashes): computed from the event's token ids, NULL where the
-- chain began before the capture. An offload tier's chunk (LMCache: 256 tokens) is one row per
-- warehouse block it holds, each with the chunk's engine hash and the warehouse's block_size.
-- No token id is kept. Re-ingesting a file replaces its rows.
CREATE TABLE IF NOT EXISTS kv_events (
    file_id             VARCHAR NOT NULL,
    frame               BIGINT NOT NULL,
    seq                 BIGINT NOT NULL,
    event_index         INTEGER NOT NULL,
    block_index         INTEGER NOT NULL,
    ts                  TIMESTAMPTZ NOT NULL,
    received_ts         TIMESTAMPTZ NOT NULL,
    rank                INTEGER NOT NULL,
    kind                VARCHAR NOT NULL,
    engine_block_hash   BLOB,
    engine_parent_hash  BLOB,
    block_size          INTEGER,
    medium              VARCHAR,
    block_id            UBIGINT,
    ingest_run_id       VARCHAR NOT NULL
);

-- The canonical request table: one row per accepted input line, whatever the log format.
-- No prompt or response text is ever stored; a prompt is its chain of block hashes.
-- Invariant: len(block_hashes) = ceil(input_tokens / block_size), and block_hashes[i] identifies
-- block i together with every block before it (equal hashes mean equal prefixes).
CREATE TABLE IF NOT EXISTS requests (
    request_id     VARCHAR NOT NULL,
    tenant         VARCHAR NOT NULL,
    session_id     VARCHAR,
    arrival_ts     TIMESTAMPTZ NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    block_size     INTEGER NOT NULL,
    block_hashes   UBIGINT[] NOT NULL,
    format         VARCHAR NOT NULL,
    file_id        VARCHAR NOT NULL,
    source         STRUCT(file VARCHAR, line BIGINT) NOT NULL,
    ingest_run_id  VARCHAR NOT NULL
);

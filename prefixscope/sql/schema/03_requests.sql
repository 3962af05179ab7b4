-- The canonical request table: one row per accepted input row, whatever the log format.
-- No prompt or response text is ever stored; a prompt is its chain of block hashes.
-- Invariant: block_hashes[i] identifies block i together with every block before it (equal
-- hashes mean equal prefixes). len(block_hashes) = ceil(input_tokens / block_size) for hash-id
-- traces (their last block may be partial), floor(...) for token sources (a partial tail block
-- is never cached, so it is not hashed).
CREATE TABLE IF NOT EXISTS requests (
    request_id              VARCHAR NOT NULL,
    tenant                  VARCHAR NOT NULL,
    session_id              VARCHAR,
    log_request_id          VARCHAR,
    arrival_ts              TIMESTAMPTZ NOT NULL,
    input_tokens            BIGINT NOT NULL,
    output_tokens           BIGINT,
    block_size              INTEGER NOT NULL,
    block_hashes            UBIGINT[] NOT NULL,
    chat_id                 BIGINT,
    parent_chat_id          BIGINT,
    turn                    INTEGER,
    request_type            VARCHAR,
    reported_cached_tokens  BIGINT,
    format                  VARCHAR NOT NULL,
    file_id                 VARCHAR NOT NULL,
    source                  STRUCT(file VARCHAR, line BIGINT) NOT NULL,
    ingest_run_id           VARCHAR NOT NULL
);
-- The usage counts as the log's API reports them, its semantics applied (docs/ingest.md#usage-
-- layouts): the prompt's tokens (Anthropic: input + cache read + cache creation) and the tokens
-- written to the provider's cache. reported_cached_tokens <= reported_prompt_tokens where both
-- are given (a line that says otherwise is rejected).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reported_prompt_tokens BIGINT;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reported_cache_creation_tokens BIGINT;
-- Added later (NULL on older rows, and on rows whose format decides): true when the engine
-- always computes the prompt's last token, the rule of token sources, for Mooncake lines
-- ingested with --full-blocks (an export of a gateway-log warehouse).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS last_token_rule BOOLEAN;
-- Added for agent traces (--format agent-json; NULL for other formats): a sub-agent's parent
-- session, the model that served the request (blocks are keyed by it), why its output stopped
-- (`tool_use`, `end_turn`), and the server's and the client's seconds as the trace records
-- them (`api_time`, `think_time`).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS parent_session_id VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS model VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS stop_reason VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS api_time_s DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS think_time_s DOUBLE;

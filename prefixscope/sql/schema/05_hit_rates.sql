-- One row per (run, tenant, policy, capacity, measure window). tenant '*' is the whole fleet.
-- capacity_blocks is NULL for the unbounded 'ceiling' policy.
-- token_hit_rate = hit_tokens / input_tokens; request_hit_rate = hit_requests / requests.
CREATE TABLE IF NOT EXISTS hit_rates (
    run_id            VARCHAR NOT NULL,
    tenant            VARCHAR NOT NULL,
    policy            VARCHAR NOT NULL,
    capacity_blocks   BIGINT,
    capacity_tokens   BIGINT,
    block_size        INTEGER NOT NULL,
    measure_window    VARCHAR NOT NULL,
    requests          BIGINT NOT NULL,
    input_tokens      BIGINT NOT NULL,
    hit_tokens        BIGINT NOT NULL,
    hit_requests      BIGINT NOT NULL,
    token_hit_rate    DOUBLE,
    request_hit_rate  DOUBLE
);

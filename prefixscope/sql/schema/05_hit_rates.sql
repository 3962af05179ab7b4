-- One row per (run, tenant, policy and its options, isolation, capacity, measure window).
-- tenant '*' is the whole fleet. capacity_blocks is NULL for the unbounded 'ceiling' policy.
-- token_hit_rate = hit_tokens / input_tokens; request_hit_rate = hit_requests / requests.
-- For the 'steady' window: warmup_requests is where measuring starts, one start shared by every
-- configuration of the run (the latest own warm-up end among them); own_warmup_requests is this
-- configuration's own warm-up end (NULL: it never filled). steady is false when the cache never
-- filled, and then the rates and interval are NULL (no steady state to report).
-- ceiling_token_hit_rate: the unbounded cache's token hit rate (same isolation) over the same
-- measured requests: no policy's token_hit_rate exceeds it.
CREATE TABLE IF NOT EXISTS hit_rates (
    run_id                   VARCHAR NOT NULL,
    tenant                   VARCHAR NOT NULL,
    policy                   VARCHAR NOT NULL,
    policy_options           VARCHAR,
    isolation                VARCHAR NOT NULL,
    capacity_blocks          BIGINT,
    capacity_tokens          BIGINT,
    capacity_gib             DOUBLE,
    model                    VARCHAR,
    kv_dtype                 VARCHAR,
    block_size               INTEGER NOT NULL,
    measure_window           VARCHAR NOT NULL,
    requests                 BIGINT NOT NULL,
    input_tokens             BIGINT NOT NULL,
    hit_tokens               BIGINT NOT NULL,
    cross_tenant_hit_tokens  BIGINT NOT NULL,
    hit_requests             BIGINT NOT NULL,
    token_hit_rate           DOUBLE,
    request_hit_rate         DOUBLE,
    warmup_requests          BIGINT,
    steady                   BOOLEAN,
    ci_low                   DOUBLE,
    ci_high                  DOUBLE,
    own_warmup_requests      BIGINT,
    ceiling_token_hit_rate   DOUBLE
);
-- Warehouses created before these columns existed.
ALTER TABLE hit_rates ADD COLUMN IF NOT EXISTS own_warmup_requests BIGINT;
ALTER TABLE hit_rates ADD COLUMN IF NOT EXISTS ceiling_token_hit_rate DOUBLE;
-- Where the caches started (simulate --warm-start: cold, first-window:SECONDS, events; NULL in
-- older rows: cold) and the requests replayed before the measured ones, never measured.
ALTER TABLE hit_rates ADD COLUMN IF NOT EXISTS warm_start VARCHAR;
ALTER TABLE hit_rates ADD COLUMN IF NOT EXISTS warm_requests BIGINT;

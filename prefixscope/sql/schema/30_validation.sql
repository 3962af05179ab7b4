-- The simulator beside the engines (prefixscope validate): one row per (run, tenant), the
-- fleet ('*') first. Each compares, over the requests with a reported count (compared of
-- requests), the simulated hit tokens of `policy` at capacity_blocks with the
-- reported_cached_tokens of `requests`, both rounded down to compare_unit_tokens (the least
-- common multiple of the warehouse's and the engine's block sizes). capacity_blocks is the
-- fleet's effective capacity: the capacity whose simulation best explains the reports (least
-- absolute error); the fleet row alone carries its range (capacity_low/high_blocks, a 95%
-- bootstrap over requests; high NULL: unbounded), the capacities that fit all requests best
-- (best_low/high_blocks) and where the curve's total meets the reported total
-- (curve_capacity_blocks). Tenant rows: agreement at the fleet's capacity (the cache is shared).
-- Only usable reports are compared and fitted: 0 up to the prompt's input tokens. beyond_prompt
-- counts the reports above the prompt's tokens (left out of every other figure);
-- ceiling_hit_tokens is what the unbounded cache serves the compared requests (in the unit), so
-- simulated_hit_tokens <= ceiling_hit_tokens and reported_hit_tokens <= input_tokens. With fewer
-- than 100 usable reports no capacity is fitted: the capacity, agreement and simulated columns
-- are NULL and note says so.
CREATE TABLE IF NOT EXISTS validation (
    run_id                  VARCHAR NOT NULL,
    tenant                  VARCHAR NOT NULL,
    policy                  VARCHAR NOT NULL,
    method                  VARCHAR NOT NULL,
    requests                BIGINT NOT NULL,
    compared                BIGINT NOT NULL,
    block_size              INTEGER NOT NULL,
    engine_block_size       INTEGER NOT NULL,
    compare_unit_tokens     INTEGER NOT NULL,
    capacity_blocks         BIGINT,
    capacity_tokens         BIGINT,
    capacity_low_blocks     BIGINT,
    capacity_high_blocks    BIGINT,
    best_low_blocks         BIGINT,
    best_high_blocks        BIGINT,
    curve_capacity_blocks   BIGINT,
    resamples               INTEGER NOT NULL,
    model                   VARCHAR,
    capacity_gib            DOUBLE,
    capacity_low_gib        DOUBLE,
    capacity_high_gib       DOUBLE,
    input_tokens            BIGINT NOT NULL,
    reported_hit_tokens     BIGINT NOT NULL,
    simulated_hit_tokens    BIGINT,
    exact_match_share       DOUBLE,
    mean_abs_error_tokens   DOUBLE,
    correlation             DOUBLE,
    reported_more           BIGINT,
    reported_fewer          BIGINT,
    note                    VARCHAR,
    beyond_prompt           BIGINT,
    ceiling_hit_tokens      BIGINT
);
-- Warehouses written before reports were checked against the prompt, and before a fit could
-- be refused: their rows say NULL for the new columns (not counted).
ALTER TABLE validation ADD COLUMN IF NOT EXISTS beyond_prompt BIGINT;
ALTER TABLE validation ADD COLUMN IF NOT EXISTS ceiling_hit_tokens BIGINT;
-- Their capacity and agreement columns were NOT NULL: schema.apply_schema drops a NOT NULL
-- that this file no longer declares, only where a warehouse still has it.

-- Hit-rate curves: one row per (run, tenant, policy, isolation, window, capacity).
-- tenant '*' is the whole fleet. method 'stack': the one-pass LRU curve; 'grid': the simulator
-- run at each capacity. exact is true when every figure is the simulator's own at that capacity
-- (sample_rate 1); a sampled curve (sample_rate < 1) is an estimate, its capacities scaled by
-- 1 / sample_rate, and sample_by says what the sample kept: 'block' (every reference to a hashed
-- subset of blocks; requests and input_tokens are then the full trace's and hit_tokens the
-- estimate) or 'family' (whole prefix families; every figure is the sample's); NULL when exact.
-- Under 'partitioned', a tenant's capacity is its own partition's size and the
-- fleet's is the whole cache. token_hit_rate = hit_tokens / input_tokens of the measured requests.
-- A sampled row says what its estimate rests on: sampled_blocks, the distinct blocks of the
-- sample its tenant's requests look up (a block sample: those drawn at the rate, not the ones
-- kept whole; the fleet: all), and for a block sample the 95% interval of token_hit_rate
-- (ci_low .. ci_high: a delete-a-group jackknife over the sampled blocks, docs/simulation.md).
-- Exact rows: all three NULL; a family sample: no interval (NULL).
CREATE TABLE IF NOT EXISTS mrc (
    run_id           VARCHAR NOT NULL,
    tenant           VARCHAR NOT NULL,
    policy           VARCHAR NOT NULL,
    isolation        VARCHAR NOT NULL,
    measure_window   VARCHAR NOT NULL,
    method           VARCHAR NOT NULL,
    capacity_blocks  BIGINT NOT NULL,
    capacity_tokens  BIGINT NOT NULL,
    capacity_gib     DOUBLE,
    model            VARCHAR,
    kv_dtype         VARCHAR,
    block_size       INTEGER NOT NULL,
    requests         BIGINT NOT NULL,
    input_tokens     BIGINT NOT NULL,
    hit_tokens       BIGINT NOT NULL,
    token_hit_rate   DOUBLE,
    exact            BOOLEAN NOT NULL,
    sample_rate      DOUBLE NOT NULL,
    sample_by        VARCHAR,
    sampled_blocks   BIGINT,
    ci_low           DOUBLE,
    ci_high          DOUBLE
);
-- Warehouses written before sample_by existed: their sampled rows say NULL (unknown).
ALTER TABLE mrc ADD COLUMN IF NOT EXISTS sample_by VARCHAR;
-- Warehouses written before the interval existed: their sampled rows say NULL (not measured).
ALTER TABLE mrc ADD COLUMN IF NOT EXISTS sampled_blocks BIGINT;
ALTER TABLE mrc ADD COLUMN IF NOT EXISTS ci_low DOUBLE;
ALTER TABLE mrc ADD COLUMN IF NOT EXISTS ci_high DOUBLE;

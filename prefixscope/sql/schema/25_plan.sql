-- The capacity planner's answers (prefixscope plan): one row per (run, kind, tenant, policy).
-- kind 'capacity': the smallest single shared cache whose token hit rate reaches
-- target_share x the ceiling (ceiling_token_hit_rate, over the same requests), per policy;
-- kind 'configuration': the cheapest simulated fleet (fleet_hit_rates) that reaches it at the
-- prices given. reached is false when nothing simulated reaches the target: the capacity
-- columns are then NULL (never extrapolated) and token_hit_rate is the best simulated.
-- steady is false when the trace never fills a cache of the answer's size (a cold-start rate).
-- source_table and source_run_id name the stored result every figure comes from; note says in
-- words what the numbers cannot.
CREATE TABLE IF NOT EXISTS plan (
    run_id                    VARCHAR NOT NULL,
    kind                      VARCHAR NOT NULL,
    tenant                    VARCHAR NOT NULL,
    policy                    VARCHAR NOT NULL,
    measure_window            VARCHAR NOT NULL,
    target_share              DOUBLE NOT NULL,
    ceiling_token_hit_rate    DOUBLE,
    target_token_hit_rate     DOUBLE,
    reached                   BOOLEAN NOT NULL,
    capacity_blocks           BIGINT,
    capacity_tokens           BIGINT,
    capacity_gib              DOUBLE,
    token_hit_rate            DOUBLE,
    method                    VARCHAR NOT NULL,
    bracket_low_blocks        BIGINT,
    largest_capacity_blocks   BIGINT,
    steady                    BOOLEAN,
    marginal_gpu_seconds_per_hour_per_gib  DOUBLE,
    router                    VARCHAR,
    replicas                  INTEGER,
    dram_blocks               BIGINT,
    store_blocks              BIGINT,
    store_unbounded           BOOLEAN,
    load_scale                DOUBLE,
    cost_per_hour             DOUBLE,
    ttft_p95_s                DOUBLE,
    model                     VARCHAR NOT NULL,
    gpu                       VARCHAR NOT NULL,
    cost_model                VARCHAR NOT NULL,
    source_table              VARCHAR NOT NULL,
    source_run_id             VARCHAR NOT NULL,
    note                      VARCHAR
);
-- A configuration's hardware: deployment (GPUxTP; NULL: the fleet run gave none), gpus per
-- replica and fleet_gpu their kind, priced at gpu_hour $ per GPU-hour each (--prices
-- gpu_hour, else the GPU's catalog price). A fleet row whose capacity exceeds its HBM is never
-- the answer. Added after the table first shipped: older warehouses gain the columns, NULL.
ALTER TABLE plan ADD COLUMN IF NOT EXISTS deployment VARCHAR;
ALTER TABLE plan ADD COLUMN IF NOT EXISTS gpus INTEGER;
ALTER TABLE plan ADD COLUMN IF NOT EXISTS fleet_gpu VARCHAR;
ALTER TABLE plan ADD COLUMN IF NOT EXISTS gpu_hour DOUBLE;
-- A configuration with a DRAM tier or a shared store: the GPU dollars its tiers' hits save an
-- hour (the fleet row's gpu_seconds_saved_dram + _store over its traffic, at gpu_hour) and the
-- tiers' own dollars an hour (cost_per_hour less its GPUs'), at the prices the plan used; NULL
-- without a tier, on a tenant's rows, or where the fleet row has no split by tier.
ALTER TABLE plan ADD COLUMN IF NOT EXISTS tier_usd_saved_per_hour DOUBLE;
ALTER TABLE plan ADD COLUMN IF NOT EXISTS tier_usd_per_hour DOUBLE;

-- One row per (run, fleet configuration, replica), over every request routed to it.
-- prefill_tokens: tokens it computed (input less hits, at least one per request);
-- decode_tokens: tokens it generated after each first token; busy_s: the sum of its step
-- times; utilisation = busy_s / the fleet's span (first arrival to the last replica idle);
-- drained_s: when it went idle for good, seconds after the first arrival (scaled clock).
CREATE TABLE IF NOT EXISTS fleet_replicas (
    run_id            VARCHAR NOT NULL,
    router            VARCHAR NOT NULL,
    replicas          INTEGER NOT NULL,
    capacity_blocks   BIGINT NOT NULL,
    policy            VARCHAR NOT NULL,
    load_scale        DOUBLE NOT NULL,
    dram_blocks       BIGINT NOT NULL,
    store_blocks      BIGINT,
    store_unbounded   BOOLEAN,
    replica           INTEGER NOT NULL,
    requests          BIGINT NOT NULL,
    input_tokens      BIGINT NOT NULL,
    hit_tokens        BIGINT NOT NULL,
    token_hit_rate    DOUBLE,
    prefill_tokens    BIGINT NOT NULL,
    decode_tokens     BIGINT NOT NULL,
    steps             BIGINT NOT NULL,
    busy_s            DOUBLE NOT NULL,
    utilisation       DOUBLE,
    drained_s         DOUBLE NOT NULL
);
-- Each replica's deployment (--deployment GPU[xTP]; all NULL: none given): gpus per replica,
-- kv_pool_blocks its KV pool in blocks of block_size, and per GPU the memory split
-- weights_gib + reserve_gib + kv_pool_gib = HBM x gpu_memory_utilization. exceeds_hbm: the
-- capacity is more than the pool holds (a what-if); without a deployment, judged against one
-- GPU of gpu serving model (NULL where that GPU has no HBM figure). Added after the tables
-- first shipped: older warehouses gain the columns, NULL in their rows.
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS deployment VARCHAR;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS gpus INTEGER;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS kv_pool_blocks BIGINT;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS weights_gib DOUBLE;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS reserve_gib DOUBLE;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS kv_pool_gib DOUBLE;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS exceeds_hbm BOOLEAN;
-- The engine (--engine: ideal, vllm, sglang; NULL in older rows: ideal) and what each
-- replica's KV pool did, time-weighted over its steps (docs/fleet.md, "Engines"):
-- preemptions; running_blocks_mean and running_blocks_p95, the blocks running requests hold
-- (ideal: would hold); prefix_cache_blocks_mean, blocks cached but not held (ideal: its whole
-- cache).
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS engine VARCHAR;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS preemptions BIGINT;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS running_blocks_mean DOUBLE;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS running_blocks_p95 DOUBLE;
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS prefix_cache_blocks_mean DOUBLE;
-- How far the router's view of the caches lagged them (--router-delay, kv-aware; 0: it read
-- them as they were; NULL in older rows: 0). Part of the configuration's key.
ALTER TABLE fleet_replicas ADD COLUMN IF NOT EXISTS router_delay_ms DOUBLE;

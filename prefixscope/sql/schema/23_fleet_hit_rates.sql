-- One row per (run, fleet configuration, measure window, tenant): replicas behind a router,
-- each with its own cache of capacity_blocks (per replica), under traffic sped up load_scale
-- times. tenant '*' is the whole fleet. token_hit_rate = hit_tokens / input_tokens, where a
-- hit is served only by the replica the request was routed to; ceiling_token_hit_rate is one
-- unbounded cache's rate over the same requests. TTFT (seconds) includes queueing, from the
-- discrete-event model of each replica (docs/fleet.md); model, gpu and cost_model say what
-- priced its steps ('calibrated', 'shipped:FILE', 'measured' or 'roofline', a lower bound;
-- cost_model_run_id: the run that fitted a calibrated one, else NULL). load_imbalance = max / mean busy time over replicas; prefill_imbalance
-- the same over prefill tokens computed. For the 'steady' window warmup_requests is where
-- measuring starts (shared by the run's configurations); steady is false when this
-- configuration's caches never all filled, and then token_hit_rate is NULL.
-- Tiers: dram_blocks per replica (0: none) read at dram_gbps; one shared store of
-- store_blocks (store_unbounded: no limit; all NULL: no store) read at store_gbps. Hits by
-- the tier that served them: hit_tokens_hbm + hit_tokens_dram + hit_tokens_store =
-- hit_tokens. Prefill GPU-seconds (one request's cost model, transfers included) without
-- any cache and with this fleet; gpu_seconds_saved_* split the difference by tier.
CREATE TABLE IF NOT EXISTS fleet_hit_rates (
    run_id                  VARCHAR NOT NULL,
    tenant                  VARCHAR NOT NULL,
    router                  VARCHAR NOT NULL,
    replicas                INTEGER NOT NULL,
    capacity_blocks         BIGINT NOT NULL,
    capacity_tokens         BIGINT NOT NULL,
    capacity_gib            DOUBLE,
    policy                  VARCHAR NOT NULL,
    load_scale              DOUBLE NOT NULL,
    dram_blocks             BIGINT NOT NULL,
    dram_gib                DOUBLE,
    dram_gbps               DOUBLE,
    store_blocks            BIGINT,
    store_unbounded         BOOLEAN,
    store_gib               DOUBLE,
    store_gbps              DOUBLE,
    block_size              INTEGER NOT NULL,
    model                   VARCHAR NOT NULL,
    gpu                     VARCHAR NOT NULL,
    cost_model              VARCHAR NOT NULL,
    cost_model_run_id       VARCHAR,
    measure_window          VARCHAR NOT NULL,
    requests                BIGINT NOT NULL,
    input_tokens            BIGINT NOT NULL,
    hit_tokens              BIGINT NOT NULL,
    hit_tokens_hbm          BIGINT NOT NULL,
    hit_tokens_dram         BIGINT NOT NULL,
    hit_tokens_store        BIGINT NOT NULL,
    token_hit_rate          DOUBLE,
    ceiling_token_hit_rate  DOUBLE,
    traffic_seconds         DOUBLE,
    transfer_s              DOUBLE,
    prefill_gpu_seconds_no_cache  DOUBLE,
    prefill_gpu_seconds     DOUBLE,
    gpu_seconds_saved_hbm   DOUBLE,
    gpu_seconds_saved_dram  DOUBLE,
    gpu_seconds_saved_store DOUBLE,
    gpu_seconds_saved_per_hour  DOUBLE,
    ttft_p50_s              DOUBLE,
    ttft_p95_s              DOUBLE,
    ttft_p99_s              DOUBLE,
    ttft_mean_s             DOUBLE,
    load_imbalance          DOUBLE,
    prefill_imbalance       DOUBLE,
    warmup_requests         BIGINT,
    steady                  BOOLEAN
);
-- Each replica's deployment (--deployment GPU[xTP]; all NULL: none given): gpus per replica,
-- kv_pool_blocks its KV pool in blocks of block_size, and per GPU the memory split
-- weights_gib + reserve_gib + kv_pool_gib = HBM x gpu_memory_utilization. exceeds_hbm: the
-- capacity is more than the pool holds (a what-if); without a deployment, judged against one
-- GPU of gpu serving model (NULL where that GPU has no HBM figure). Added after the tables
-- first shipped: older warehouses gain the columns, NULL in their rows.
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS deployment VARCHAR;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS gpus INTEGER;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS kv_pool_blocks BIGINT;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS weights_gib DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS reserve_gib DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS kv_pool_gib DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS exceeds_hbm BOOLEAN;
-- The engine (--engine: ideal, vllm, sglang; NULL in older rows: ideal) and what each
-- replica's KV pool did, time-weighted over its steps (docs/fleet.md, "Engines"):
-- preemptions; running_blocks_mean and running_blocks_p95, the blocks running requests hold
-- (ideal: would hold); prefix_cache_blocks_mean, blocks cached but not held (ideal: its whole
-- cache).
-- Per fleet row: preemptions summed over the replicas, the others their mean over replicas.
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS engine VARCHAR;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS preemptions BIGINT;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS running_blocks_mean DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS running_blocks_p95 DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS prefix_cache_blocks_mean DOUBLE;
-- Lookups after a preemption (vllm, sglang; 0 under ideal), counted apart from the hit rate
-- as vLLM's preempted_requests, preempted_queries and preempted_hits are
-- (vllm/v1/metrics/stats.py): how many, the tokens they looked up, the tokens they found.
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS preempted_lookups BIGINT;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS preempted_query_tokens BIGINT;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS preempted_hit_tokens BIGINT;
-- Units and dollars (added after the table first shipped). Every *gpu_seconds* column counts
-- GPUs × seconds: a replica's busy time times the gpus of its deployment (NULL: 1);
-- gpu_seconds_unit 'gpu-seconds'. Rows written before it counted one replica's time; opening
-- the warehouse converts them once (catalog/gpu_seconds_fleet.sql). gpu_hour: one GPU's $ an
-- hour (--prices, else the GPU's catalog price); usd_saved_per_hour: what the whole cache
-- saves, gpu_seconds_saved_per_hour / 3600 × gpu_hour; tier_usd_saved_per_hour: the part the
-- DRAM tier and the store served (gpu_seconds_saved_dram + _store). tier_gib: what the fleet
-- buys, replicas × its DRAM tier + the store (an unbounded store at the trace's distinct
-- blocks, the most it holds; 0: no tier). On the fleet's rows (tenant '*'), tier_usd_per_hour
-- is the tiers' own price (each GB × its $ per GB-hour, the prices file of --prices)
-- and tier_net_usd_per_hour = tier_usd_saved_per_hour - tier_usd_per_hour: positive where the
-- tiers pay for themselves. Both are NULL on a tenant's rows (a tenant does not buy a tier)
-- and 0 where there is no tier.
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS gpu_seconds_unit VARCHAR;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS gpu_hour DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS usd_saved_per_hour DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS tier_usd_saved_per_hour DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS tier_gib DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS tier_usd_per_hour DOUBLE;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS tier_net_usd_per_hour DOUBLE;
-- How far the router's view of the caches lagged them (--router-delay, kv-aware; 0: it read
-- them as they were; NULL in older rows: 0). Part of the configuration's key.
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS router_delay_ms DOUBLE;
-- Where the caches started (fleet --warm-start: cold, first-window:SECONDS, events; NULL in
-- older rows: cold) and the requests replayed before the measured ones, never measured.
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS warm_start VARCHAR;
ALTER TABLE fleet_hit_rates ADD COLUMN IF NOT EXISTS warm_requests BIGINT;

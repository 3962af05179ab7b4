-- What the prefix cache saves, per tenant ('*': the fleet), for one simulated configuration's
-- request_outcomes and one prefill cost model ('calibrated': a miss_cost_models row;
-- 'shipped:FILE': one shipped with prefixscope; 'measured': vLLM's kernels measured on `gpu`,
-- cost_model_run_id NULL; 'roofline': the analytic model of `model` on `gpu`, a lower bound).
-- Prefill only: decode time does not depend on the prefix cache. A request costs T(input, 0)
-- without a cache and T(max(1, input - hit), input - max(1, input - hit)) with it. The
-- time-to-first-token figures are those prefill times alone (an idle GPU, no queueing, no
-- batching).
-- gpu_seconds_saved_per_hour divides by traffic_seconds, the fleet's arrival span.
CREATE TABLE IF NOT EXISTS savings (
    run_id                          VARCHAR NOT NULL,
    outcomes_run_id                 VARCHAR NOT NULL,
    policy                          VARCHAR NOT NULL,
    isolation                       VARCHAR NOT NULL,
    capacity_blocks                 BIGINT,
    tenant                          VARCHAR NOT NULL,
    model                           VARCHAR NOT NULL,
    gpu                             VARCHAR NOT NULL,
    cost_model                      VARCHAR NOT NULL,
    cost_model_run_id               VARCHAR,
    requests                        BIGINT NOT NULL,
    input_tokens                    BIGINT NOT NULL,
    hit_tokens                      BIGINT NOT NULL,
    traffic_seconds                 DOUBLE,
    prefill_gpu_seconds_no_cache    DOUBLE NOT NULL,
    prefill_gpu_seconds_with_cache  DOUBLE NOT NULL,
    gpu_seconds_saved               DOUBLE NOT NULL,
    saved_share                     DOUBLE,
    gpu_seconds_saved_per_hour      DOUBLE,
    ttft_p50_no_cache_s             DOUBLE NOT NULL,
    ttft_p95_no_cache_s             DOUBLE NOT NULL,
    ttft_p50_with_cache_s           DOUBLE NOT NULL,
    ttft_p95_with_cache_s           DOUBLE NOT NULL
);
-- The deployment priced (GPU[xTP]), its GPUs, and its KV pool in the trace's blocks: the
-- configuration priced holds at most that pool. NULL where the GPU has no HBM figure (a
-- NAME:TFLOPS:TBPS spec) or the cost model is a CPU's.
ALTER TABLE savings ADD COLUMN IF NOT EXISTS deployment VARCHAR;
ALTER TABLE savings ADD COLUMN IF NOT EXISTS gpus INTEGER;
ALTER TABLE savings ADD COLUMN IF NOT EXISTS kv_pool_blocks BIGINT;
-- Units (added after the table first shipped): every *gpu_seconds* column counts GPUs ×
-- seconds, a prefill's time times the gpus it runs on (gpu_seconds_unit 'gpu-seconds'; the
-- TTFT columns stay one prefill's wall time). gpu_hour is one GPU's $ an hour (the prices file
-- of --prices, else the GPU's catalog price) and usd_saved_per_hour = gpu_seconds_saved_per_hour
-- / 3600 × gpu_hour; both NULL for a CPU calibration. Rows written before the unit counted one
-- tensor-parallel group's time; opening the warehouse converts them (× gpus, NULL: 1) once
-- (catalog/gpu_seconds_savings.sql).
ALTER TABLE savings ADD COLUMN IF NOT EXISTS gpu_seconds_unit VARCHAR;
ALTER TABLE savings ADD COLUMN IF NOT EXISTS gpu_hour DOUBLE;
ALTER TABLE savings ADD COLUMN IF NOT EXISTS usd_saved_per_hour DOUBLE;

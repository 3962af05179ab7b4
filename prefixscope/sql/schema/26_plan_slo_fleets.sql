-- The SLO planner's search (prefixscope plan --deployments … --slo …): one row per fleet
-- simulated, per (run, load_scale, prefix_caching). Each replica is a deployment (GPUxTP of
-- gpu, tp GPUs) whose KV pool (kv_pool_gib_per_gpu on each GPU) is its cache, so every row fits
-- its HBM; gpus = replicas x tp. prefix_caching false: the same fleet on the trace whose blocks
-- never repeat. Latencies in seconds over every request, on the load-scaled clock;
-- usd_per_hour prices GPUs, DRAM tiers and the store (docs/plan.md); binding is the SLO target
-- with the least slack (missed by the most, when meets_slo is false).
CREATE TABLE IF NOT EXISTS plan_slo_fleets (
    run_id                  VARCHAR NOT NULL,
    load_scale              DOUBLE NOT NULL,
    prefix_caching          BOOLEAN NOT NULL,
    engine                  VARCHAR NOT NULL,
    deployment              VARCHAR NOT NULL,
    gpu                     VARCHAR NOT NULL,
    tp                      INTEGER NOT NULL,
    replicas                INTEGER NOT NULL,
    gpus                    INTEGER NOT NULL,
    router                  VARCHAR NOT NULL,
    dram_gib_per_replica    DOUBLE NOT NULL,
    store_gib               DOUBLE,
    kv_pool_gib_per_gpu     DOUBLE NOT NULL,
    token_hit_rate          DOUBLE NOT NULL,
    ttft_p95_s              DOUBLE NOT NULL,
    ttft_p99_s              DOUBLE NOT NULL,
    tpot_p95_s              DOUBLE NOT NULL,
    usd_per_hour            DOUBLE NOT NULL,
    meets_slo               BOOLEAN NOT NULL,
    binding                 VARCHAR NOT NULL
);

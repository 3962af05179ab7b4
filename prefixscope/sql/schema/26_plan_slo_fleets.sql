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
-- The SLO is held window by window (added later; NULL on rows of older versions): the row's
-- latencies are those of the window that binds it (the least slack among the windows it was
-- judged on), window_start_s to window_end_s seconds after the trace's first arrival.
-- stopped_early: its run stopped once a TTFT target was missed for sure in that window, so it
-- misses and its latencies and hit rate are lower bounds over what was simulated.
ALTER TABLE plan_slo_fleets ADD COLUMN IF NOT EXISTS window_start_s DOUBLE;
ALTER TABLE plan_slo_fleets ADD COLUMN IF NOT EXISTS window_end_s DOUBLE;
ALTER TABLE plan_slo_fleets ADD COLUMN IF NOT EXISTS stopped_early BOOLEAN;

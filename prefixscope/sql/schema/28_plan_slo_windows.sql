-- The SLO planner window by window (prefixscope plan --slo … --per-window): one row per (run,
-- load_scale, prefix_caching, window), each window of window_start_s to window_end_s seconds
-- after the trace's first arrival searched alone (after one window of warm-up on the same
-- fleet), as a perfect autoscaler would size it. met false: no fleet searched meets the SLO in
-- that window, and the fleet columns are NULL; else they are its cheapest fleet's, as in
-- plan_slo_answers.
CREATE TABLE IF NOT EXISTS plan_slo_windows (
    run_id                  VARCHAR NOT NULL,
    load_scale              DOUBLE NOT NULL,
    prefix_caching          BOOLEAN NOT NULL,
    window_start_s          DOUBLE NOT NULL,
    window_end_s            DOUBLE NOT NULL,
    requests                BIGINT NOT NULL,
    met                     BOOLEAN NOT NULL,
    deployment              VARCHAR,
    replicas                INTEGER,
    gpus                    INTEGER,
    router                  VARCHAR,
    dram_gib_per_replica    DOUBLE,
    store_gib               DOUBLE,
    usd_per_hour            DOUBLE,
    token_hit_rate          DOUBLE,
    ttft_p95_s              DOUBLE,
    binding                 VARCHAR
);

-- The SLO planner's disaggregated answers (`plan --slo … --disagg`): one row per (run,
-- load_scale), caching on. met: some split of the deployment into prefill_replicas and
-- decode_replicas meets every target of slo in the busiest window (window_start_s to
-- window_end_s, seconds after the first arrival; not re-checked in the other windows); the
-- fleet columns are then the fewest GPUs that do (the most slack among splits of that size),
-- else the closest split tried (the greatest least slack), which is no answer. The search
-- stops at max_replicas_searched replicas in all. colocated_gpus: the colocated answer's GPUs
-- at the same load scale (NULL: none met); gpus_fewer_than_colocated: colocated_gpus − gpus
-- (negative: the colocated fleet needs fewer), NULL unless both met. The KV moves over link
-- at link_gbps GB/s one way per GPU (NULL: unbounded). Semantics in docs/plan.md.
CREATE TABLE IF NOT EXISTS plan_slo_disagg (
    run_id                     VARCHAR NOT NULL,
    load_scale                 DOUBLE NOT NULL,
    slo                        VARCHAR NOT NULL,
    deployment                 VARCHAR NOT NULL,
    router                     VARCHAR NOT NULL,
    link                       VARCHAR NOT NULL,
    link_gbps                  DOUBLE,
    met                        BOOLEAN NOT NULL,
    prefill_replicas           INTEGER,
    decode_replicas            INTEGER,
    gpus                       INTEGER,
    usd_per_hour               DOUBLE,
    ttft_p95_s                 DOUBLE,
    tpot_p95_s                 DOUBLE,
    binding                    VARCHAR,
    token_hit_rate             DOUBLE,
    fleets_searched            BIGINT NOT NULL,
    max_replicas_searched      INTEGER NOT NULL,
    window_start_s             DOUBLE NOT NULL,
    window_end_s               DOUBLE NOT NULL,
    colocated_gpus             INTEGER,
    gpus_fewer_than_colocated  INTEGER,
    cost_model                 VARCHAR NOT NULL
);

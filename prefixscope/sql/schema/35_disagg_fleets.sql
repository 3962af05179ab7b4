-- One row per (run, layout): a disaggregated fleet (prefill replicas, decode replicas and the
-- link the KV moves over) and the colocated fleet of the same GPUs, on the same traffic
-- (`prefixscope disagg`, docs/fleet.md "Disaggregated prefill and decode").
-- ttft: arrival to the first token out (disaggregated: the KV landed on a decode replica);
-- tpot: (done − first token) / (output − 1), requests of two output tokens or more;
-- transfer_p95_s, decode_wait_p95_s: the KV's move and the wait for a decode replica's room
-- (NULL colocated); *_utilisation: a pool's busy seconds per replica over the fleet's span
-- (colocated: both phases in prefill_utilisation); refused: requests larger than a decode
-- replica's pool, never served (their TTFT not counted).
CREATE TABLE IF NOT EXISTS disagg_fleets (
    run_id               VARCHAR NOT NULL,
    layout               VARCHAR NOT NULL,
    prefill_deployment   VARCHAR NOT NULL,
    prefill_replicas     INTEGER NOT NULL,
    decode_deployment    VARCHAR,
    decode_replicas      INTEGER NOT NULL,
    gpus                 INTEGER NOT NULL,
    router               VARCHAR NOT NULL,
    engine               VARCHAR NOT NULL,
    model                VARCHAR NOT NULL,
    load_scale           DOUBLE NOT NULL,
    link                 VARCHAR,
    link_gbps            DOUBLE,
    requests             BIGINT NOT NULL,
    refused              BIGINT NOT NULL,
    token_hit_rate       DOUBLE NOT NULL,
    ttft_p50_s           DOUBLE,
    ttft_p95_s           DOUBLE,
    ttft_p99_s           DOUBLE,
    tpot_p50_s           DOUBLE,
    tpot_p95_s           DOUBLE,
    transfer_p95_s       DOUBLE,
    decode_wait_p95_s    DOUBLE,
    prefill_utilisation  DOUBLE NOT NULL,
    decode_utilisation   DOUBLE,
    cost_source          VARCHAR NOT NULL
);

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

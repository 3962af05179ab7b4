-- Token hit rate per tenant ('*': fleet) per time bucket, for each simulated configuration: the
-- warm-up and any drift, as a dashboard draws them. Every request of the trace is counted.
CREATE TABLE IF NOT EXISTS hit_rate_timeseries (
    run_id           VARCHAR NOT NULL,
    tenant           VARCHAR NOT NULL,
    policy           VARCHAR NOT NULL,
    isolation        VARCHAR NOT NULL,
    capacity_blocks  BIGINT,
    bucket_start     TIMESTAMPTZ NOT NULL,
    bucket_seconds   DOUBLE NOT NULL,
    requests         BIGINT NOT NULL,
    input_tokens     BIGINT NOT NULL,
    hit_tokens       BIGINT NOT NULL,
    token_hit_rate   DOUBLE
);

-- One row per request shape replayed on a device (`prefixscope replay`, the GPU benchmark): the
-- shape run as a miss (all input_tokens computed) and as a hit (new_tokens computed after
-- cached_tokens taken from the paged cache), median times, and the analytic FLOPs and roofline
-- times of both. input_tokens = new_tokens + cached_tokens. Requests longer than the replay's
-- --max-tokens are scaled down to it, hit share kept: request_* are the trace's own figures.
-- held_out: not used to fit the cost model, only to measure its error.
CREATE TABLE IF NOT EXISTS replay_samples (
    run_id                 VARCHAR NOT NULL,
    sample                 INTEGER NOT NULL,
    request_id             VARCHAR,
    tenant                 VARCHAR,
    outcomes_run_id        VARCHAR,
    model                  VARCHAR NOT NULL,
    device                 VARCHAR NOT NULL,
    gpu                    VARCHAR NOT NULL,
    dtype                  VARCHAR NOT NULL,
    block_size             INTEGER NOT NULL,
    chunk                  INTEGER,
    request_input_tokens   BIGINT,
    request_hit_tokens     BIGINT,
    input_tokens           BIGINT NOT NULL,
    new_tokens             BIGINT NOT NULL,
    cached_tokens          BIGINT NOT NULL,
    held_out               BOOLEAN NOT NULL,
    miss_seconds           DOUBLE NOT NULL,
    hit_seconds            DOUBLE NOT NULL,
    miss_flops             DOUBLE NOT NULL,
    hit_flops              DOUBLE NOT NULL,
    miss_flops_per_s       DOUBLE NOT NULL,
    hit_flops_per_s        DOUBLE NOT NULL,
    miss_roofline_seconds  DOUBLE NOT NULL,
    hit_roofline_seconds   DOUBLE NOT NULL,
    repeats                INTEGER NOT NULL
);

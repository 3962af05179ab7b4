-- Per simulated configuration, tenant ('*': fleet), gap bucket and sub-agent or not: where the
-- missed tokens were, by the time since the previous request of the request's session
-- (analysis/simulation/gaps.py). Written by `simulate` when some request names a session.
-- Invariant: per (run, configuration, tenant), the buckets' requests and missed tokens add up
-- to the tenant's, and their shares to 1.
CREATE TABLE IF NOT EXISTS misses_by_gap (
    run_id           VARCHAR NOT NULL,
    tenant           VARCHAR NOT NULL,
    policy           VARCHAR NOT NULL,
    isolation        VARCHAR NOT NULL,
    capacity_blocks  BIGINT,             -- NULL: unbounded (ceiling)
    gap_bucket       VARCHAR NOT NULL,   -- 'no session', 'first', '<10s', '10s-1m', ...
    gap_low_s        DOUBLE,             -- the gap range [low, high); NULL for the first two
    gap_high_s       DOUBLE,
    subagent         BOOLEAN NOT NULL,   -- the request is a sub-agent's
    requests         BIGINT NOT NULL,
    input_tokens     BIGINT NOT NULL,
    missed_tokens    BIGINT NOT NULL,    -- input minus hit tokens
    share            DOUBLE              -- of the tenant's missed tokens in the configuration
);

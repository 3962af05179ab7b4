-- Time between consecutive uses of a block (one `structure` run), per tenant ('*': fleet) and
-- request kind ('*': all) of the request that reuses it: a histogram. A use is a request
-- looking the block up (a block repeated within one request is one use); the gap is to the
-- previous use by any request. Bins are (low_s, high_s]; high_s NULL is unbounded. The share of
-- reuses within T seconds is sum(reuses) over bins with high_s <= T over sum(reuses).
CREATE TABLE IF NOT EXISTS reuse_times (
    run_id        VARCHAR NOT NULL,
    tenant        VARCHAR NOT NULL,
    request_kind  VARCHAR NOT NULL,
    low_s         DOUBLE NOT NULL,
    high_s        DOUBLE,
    reuses        BIGINT NOT NULL,
    reuse_tokens  BIGINT NOT NULL
);

-- The prefixes many sessions start with (one `structure` run), ranked by sessions, then
-- length. A shared prefix ends at a block that two or more sessions look up and whose children
-- are each looked up by fewer sessions (where sessions part ways). tokens_saved: hit tokens of
-- `pinned` with this one prefix pinned minus those of plain `lru`, at capacity_blocks.
CREATE TABLE IF NOT EXISTS shared_prefixes (
    run_id               VARCHAR NOT NULL,
    rank                 INTEGER NOT NULL,
    prefix_hash          UBIGINT NOT NULL,  -- hash of its last block: `--pin` takes it
    blocks               INTEGER NOT NULL,
    tokens               BIGINT NOT NULL,
    sessions             BIGINT NOT NULL,
    requests             BIGINT NOT NULL,
    tenants              BIGINT NOT NULL,
    tenant_names         VARCHAR[] NOT NULL,
    first_seen           TIMESTAMPTZ NOT NULL,
    last_seen            TIMESTAMPTZ NOT NULL,
    median_gap_s         DOUBLE,            -- between consecutive requests using it
    capacity_blocks      BIGINT,
    lru_hit_tokens       BIGINT,
    pinned_hit_tokens    BIGINT,
    tokens_saved         BIGINT             -- NULL: not simulated (beyond the top few, or too big to pin)
);

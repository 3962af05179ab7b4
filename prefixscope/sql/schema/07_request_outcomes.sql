-- Per request, what one simulated configuration gave it (written with `simulate --outcomes`).
-- first_miss_block: position (0-based) of the first block not found, NULL on a full hit.
CREATE TABLE IF NOT EXISTS request_outcomes (
    run_id                   VARCHAR NOT NULL,
    request_id               VARCHAR NOT NULL,
    tenant                   VARCHAR NOT NULL,
    policy                   VARCHAR NOT NULL,
    isolation                VARCHAR NOT NULL,
    capacity_blocks          BIGINT,
    input_tokens             BIGINT NOT NULL,
    hit_blocks               INTEGER NOT NULL,
    hit_tokens               BIGINT NOT NULL,
    first_miss_block         INTEGER,
    cross_tenant_hit_tokens  BIGINT NOT NULL
);

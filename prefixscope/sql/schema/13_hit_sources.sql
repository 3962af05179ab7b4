-- Where each tenant's hit tokens come from ('*': fleet), per configuration of one `structure`
-- run: ceiling (capacity NULL) and lru at a capacity. Every hit block is in exactly one class,
-- so own_session_tokens + shared_prefix_tokens + other_tenant_tokens = hit_tokens.
CREATE TABLE IF NOT EXISTS hit_sources (
    run_id                VARCHAR NOT NULL,
    tenant                VARCHAR NOT NULL,
    policy                VARCHAR NOT NULL,
    capacity_blocks       BIGINT,
    requests              BIGINT NOT NULL,
    input_tokens          BIGINT NOT NULL,
    hit_tokens            BIGINT NOT NULL,
    own_session_tokens    BIGINT NOT NULL,  -- blocks an earlier request of the same session used
    shared_prefix_tokens  BIGINT NOT NULL,  -- other blocks this tenant inserted
    other_tenant_tokens   BIGINT NOT NULL   -- blocks another tenant inserted
);

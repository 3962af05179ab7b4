-- The requests whose simulated and reported hit tokens differ most (prefixscope validate),
-- rank 1 the largest difference, at the run's effective capacity (capacity_blocks, as in
-- validation). first_disagreeing_block: the position of the first block one side counts as
-- cached and the other does not; block_hash its hash (NULL past the prompt's blocks);
-- hit_capacity_blocks the smallest LRU capacity at which the simulation reaches past it (lru
-- only; NULL when nothing earlier in the log holds it); cause: unseen, evicted, last_token,
-- beyond_prompt (the engine reported more) or kept (it reported fewer) — docs/validate.md.
CREATE TABLE IF NOT EXISTS validation_disagreements (
    run_id                  VARCHAR NOT NULL,
    policy                  VARCHAR NOT NULL,
    capacity_blocks         BIGINT NOT NULL,
    rank                    INTEGER NOT NULL,
    tenant                  VARCHAR NOT NULL,
    request_id              VARCHAR NOT NULL,
    input_tokens            BIGINT NOT NULL,
    reported_cached_tokens  BIGINT NOT NULL,
    reported_hit_tokens     BIGINT NOT NULL,
    simulated_hit_tokens    BIGINT NOT NULL,
    error_tokens            BIGINT NOT NULL,
    first_disagreeing_block INTEGER NOT NULL,
    block_hash              UBIGINT,
    hit_capacity_blocks     BIGINT,
    cause                   VARCHAR NOT NULL
);

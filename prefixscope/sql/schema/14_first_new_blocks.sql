-- Where reuse breaks (one `structure` run): per tenant ('*': fleet), how many requests meet
-- their first never-seen block (no earlier request looked it up) in each bin of positions.
-- Bins are [from_block, to_block); a request with no new block has from_block NULL.
-- novel_tokens: the tokens from that block to the end of the prompt.
CREATE TABLE IF NOT EXISTS first_new_blocks (
    run_id         VARCHAR NOT NULL,
    tenant         VARCHAR NOT NULL,
    from_block     INTEGER,
    to_block       INTEGER,
    from_token     BIGINT,
    to_token       BIGINT,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    novel_tokens   BIGINT NOT NULL
);

-- Rows of one file while it streams in; every format's parser yields exactly these columns.
CREATE OR REPLACE TEMP TABLE ingest_stage (
    line          BIGINT NOT NULL,
    reason        VARCHAR,
    detail        VARCHAR,
    arrival_ts    TIMESTAMPTZ,
    tenant        VARCHAR,
    session_id    VARCHAR,
    input_tokens  BIGINT,
    output_tokens BIGINT,
    block_size    INTEGER,
    block_hashes  UBIGINT[]
);

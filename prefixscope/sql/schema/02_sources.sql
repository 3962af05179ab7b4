-- One row per ingested input file, keyed by the SHA-256 of its decompressed bytes: the same
-- content ingested again (under any path, compressed or not) replaces its earlier rows.
-- Invariant: lines = accepted + rejected.
CREATE TABLE IF NOT EXISTS sources (
    file_id        VARCHAR NOT NULL,
    path           VARCHAR NOT NULL,
    format         VARCHAR NOT NULL,
    bytes          BIGINT NOT NULL,
    lines          BIGINT NOT NULL,
    accepted       BIGINT NOT NULL,
    rejected       BIGINT NOT NULL,
    complete       BOOLEAN NOT NULL,
    out_of_order   BIGINT NOT NULL,  -- accepted rows arriving before an earlier line's arrival
    ingest_run_id  VARCHAR NOT NULL,
    ingested_at    TIMESTAMPTZ NOT NULL
);

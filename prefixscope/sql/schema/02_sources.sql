-- One row per ingested input file, keyed by the SHA-256 of its decompressed bytes. A file is
-- the same file as an earlier source when it has the same content (under any path, compressed
-- or not) or the same resolved path (a log that grew): ingesting it again replaces that
-- source's rows.
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
-- Added after the first release (existing warehouses gain it; NULL on their older rows, which
-- then match by `path`): the absolute, symlink-resolved path the file was read from.
ALTER TABLE sources ADD COLUMN IF NOT EXISTS resolved_path VARCHAR;
-- The key its block hashes were stored under (ingest/hashkey.py): the key's fingerprint, 16 hex
-- digits that tell keys apart and reveal nothing of them; 'none': plain, unkeyed hashes. NULL on
-- rows written before keys existed, whose hashes are plain. Every source of a warehouse has one
-- fingerprint: an ingest under another is refused.
ALTER TABLE sources ADD COLUMN IF NOT EXISTS hash_key VARCHAR;

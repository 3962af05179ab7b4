-- One row per input line that was not accepted, with a reason code and a short message that
-- never quotes the line itself (it may hold prompt text).
CREATE TABLE IF NOT EXISTS rejects (
    file_id        VARCHAR NOT NULL,
    source         STRUCT(file VARCHAR, line BIGINT) NOT NULL,
    format         VARCHAR NOT NULL,
    reason         VARCHAR NOT NULL,
    detail         VARCHAR NOT NULL,
    ingest_run_id  VARCHAR NOT NULL
);

-- One row per command that wrote to the warehouse. A row is inserted with status 'running'
-- before any other write of that command, and closed as 'succeeded' or 'failed'; every row the
-- command wrote carries its run_id, so a 'failed' run names what to distrust.
CREATE TABLE IF NOT EXISTS runs (
    run_id       VARCHAR NOT NULL,
    command      VARCHAR NOT NULL,
    parameters   JSON,
    version      VARCHAR NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ,
    status       VARCHAR NOT NULL,
    error        VARCHAR
);
-- Which process ran it (added later; NULL on rows of older versions): a 'running' row whose
-- process is gone is marked 'abandoned' by the next command that opens the warehouse to write.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS pid BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS host VARCHAR;

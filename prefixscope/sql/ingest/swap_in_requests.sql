-- Move the staged accepted rows of one file into the warehouse. Run inside the publish
-- transaction, after the file's earlier rows were deleted. `ingest_stage` is replaced by the
-- file's table in the attached staging file (stage_table.sql: already in the layout of
-- `requests`, request_id = first 16 hex digits of the file id, ':', line number, stable across
-- re-ingests of the same content); view `dups(line, detail)` holds the lines found to repeat a
-- request id while publishing (they go to rejects instead).
INSERT INTO requests BY NAME
SELECT * EXCLUDE (line, reason, detail), $run_id AS ingest_run_id
FROM ingest_stage
WHERE reason IS NULL
  AND line NOT IN (SELECT line FROM dups);

-- Move the staged accepted rows of one file into the warehouse. Run inside the publish
-- transaction, after the file's earlier rows were deleted. View `ingest_stage` holds the file's
-- staged rows (STAGE_SCHEMA, one per line read: prefixscope/ingest/staging.py); view
-- `dups(line, detail)` the lines found to repeat a request id while publishing (they go to
-- rejects instead). request_id = first 16 hex digits of the file id, ':', line number: stable
-- across re-ingests of the same content. Only the copy runs here: the rows were computed before
-- the warehouse was opened.
INSERT INTO requests BY NAME
SELECT * EXCLUDE (line, reason, detail),
       substr($file_id, 1, 16) || ':' || line AS request_id,
       $format AS format,
       $file_id AS file_id,
       {'file': $path, 'line': line} AS source,
       $run_id AS ingest_run_id
FROM ingest_stage
WHERE reason IS NULL
  AND line NOT IN (SELECT line FROM dups);

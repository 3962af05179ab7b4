-- Move the staged accepted rows of one file into the warehouse. Run inside one transaction, after
-- the file's earlier rows (same $file_id) were deleted. request_id = first 16 hex digits of the
-- file id, ':', line number: stable across re-ingests of the same content.
INSERT INTO requests BY NAME
SELECT substr($file_id, 1, 16) || ':' || line AS request_id,
       * EXCLUDE (line, reason, detail),
       $format AS format,
       $file_id AS file_id,
       {'file': $path, 'line': line} AS source,
       $run_id AS ingest_run_id
FROM ingest_stage
WHERE reason IS NULL;

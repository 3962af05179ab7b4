-- Move the staged rejected rows of one file into the warehouse (same transaction as
-- swap_in_requests.sql). The raw line is never copied: only its reason and a short detail.
INSERT INTO rejects
SELECT $file_id, {'file': $path, 'line': line}, $format, reason, detail, $run_id
FROM ingest_stage
WHERE reason IS NOT NULL;

-- Move the staged rejected rows of one file into the warehouse (same transaction as
-- swap_in_requests.sql), with the lines of view `dups(line, detail)` as duplicate_request_id.
-- In: view `ingest_stage` (the file's narrow staged columns suffice: line, reason, detail).
-- The raw line is never copied: only its reason and a short detail.
INSERT INTO rejects
SELECT $file_id, {'file': $path, 'line': s.line}, $format,
       CASE WHEN d.line IS NULL THEN s.reason ELSE 'duplicate_request_id' END,
       CASE WHEN d.line IS NULL THEN s.detail ELSE d.detail END,
       $run_id
FROM ingest_stage AS s LEFT JOIN dups AS d ON d.line = s.line
WHERE s.reason IS NOT NULL OR d.line IS NOT NULL;

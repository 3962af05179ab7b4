-- Move the staged accepted rows of one file into the warehouse. Run inside one transaction, after the
-- file's earlier rows (same $file_id) were deleted. request_id = first 16 hex digits of the
-- file id, ':', line number: stable across re-ingests of the same content.
INSERT INTO requests
SELECT substr($file_id, 1, 16) || ':' || line, tenant, session_id, arrival_ts,
       input_tokens, output_tokens, block_size, block_hashes, $format, $file_id,
       {'file': $path, 'line': line}, $run_id
FROM ingest_stage
WHERE reason IS NULL
ORDER BY line;

-- Lines whose request id was seen on an earlier accepted line of the same file, or on a request
-- of another file already in the warehouse (the first occurrence stays).
-- In: view `ids(line, log_request_id)` of the file's accepted rows that carry an id; $file_id.
SELECT line
FROM (
    SELECT line, log_request_id,
           row_number() OVER (PARTITION BY log_request_id ORDER BY line) AS nth
    FROM ids
) AS i
WHERE nth > 1
   OR EXISTS (
        SELECT 1 FROM requests q
        WHERE q.log_request_id = i.log_request_id AND q.file_id <> $file_id
   )

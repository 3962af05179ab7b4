-- Lines whose request id was seen on an earlier accepted line of the same file, in an earlier
-- file of the same command, or on a request already in the warehouse outside the sources this
-- command replaces (the first occurrence stays).
-- In: views `ids(line, log_request_id)` of the file's accepted rows that carry an id,
--     `command_ids(log_request_id)` of the command's earlier files, `gone(file_id)` of the
--     sources being replaced.
SELECT line
FROM (
    SELECT line, log_request_id,
           row_number() OVER (PARTITION BY log_request_id ORDER BY line) AS nth
    FROM ids
) AS i
WHERE nth > 1
   OR EXISTS (SELECT 1 FROM command_ids c WHERE c.log_request_id = i.log_request_id)
   OR EXISTS (
        SELECT 1 FROM requests q
        WHERE q.log_request_id = i.log_request_id
          AND q.file_id NOT IN (SELECT file_id FROM gone)
   )

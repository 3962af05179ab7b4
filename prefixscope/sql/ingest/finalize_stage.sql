-- The last rules of a file, which need the whole file and the warehouse: a request id seen on an
-- earlier line of the file, or in another file already in the warehouse, is a duplicate (the
-- first one stays). Also flags, for counting, accepted rows that arrive before an earlier line's
-- arrival (they are kept: replay sorts by time).
-- In: view `ingest_stage` (STAGE_SCHEMA), $file_id.
WITH ranked AS (
    SELECT *,
        CASE WHEN reason IS NULL AND log_request_id IS NOT NULL
             THEN row_number() OVER (PARTITION BY log_request_id, reason IS NULL ORDER BY line)
        END AS nth
    FROM ingest_stage
),
judged AS (
    SELECT r.*,
        CASE
            WHEN r.nth > 1 THEN 'duplicate_request_id'
            WHEN r.nth = 1 AND EXISTS (
                SELECT 1 FROM requests q
                WHERE q.log_request_id = r.log_request_id AND q.file_id <> $file_id
            ) THEN 'duplicate_request_id'
        END AS duplicate
    FROM ranked r
)
SELECT * EXCLUDE (nth, duplicate, reason, detail),
    coalesce(duplicate, reason) AS reason,
    CASE WHEN duplicate IS NOT NULL
         THEN 'request id already seen (first in this file at an earlier line, or in another file)'
         ELSE detail END AS detail,
    coalesce(duplicate, reason) IS NULL
        AND arrival_ts < max(arrival_ts) FILTER (coalesce(duplicate, reason) IS NULL) OVER (
            ORDER BY line ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        AS out_of_order
FROM judged
ORDER BY line

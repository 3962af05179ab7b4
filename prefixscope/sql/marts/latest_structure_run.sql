-- The newest `structure` run that succeeded after the last successful ingest (the freshness
-- rule of latest_hit_rates): every structure table of the report is read under this run_id.
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
)
SELECT run_id FROM runs
WHERE command = 'structure' AND status = 'succeeded'
  AND finished_at >= (SELECT finished FROM last_ingest)
ORDER BY finished_at DESC, run_id DESC
LIMIT 1

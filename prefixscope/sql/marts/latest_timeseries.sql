-- The fleet's hit rate per time bucket from the newest successful simulation after the last
-- successful ingest (the same freshness rule as latest_hit_rates).
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
),
newest AS (
    SELECT run_id FROM runs
    WHERE command = 'simulate' AND status = 'succeeded'
      AND finished_at >= (SELECT finished FROM last_ingest)
      AND run_id IN (SELECT run_id FROM hit_rate_timeseries)
    ORDER BY finished_at DESC LIMIT 1
)
SELECT policy, isolation, capacity_blocks, bucket_start, token_hit_rate, requests
FROM hit_rate_timeseries
WHERE run_id = (SELECT run_id FROM newest) AND tenant = '*'
ORDER BY policy, isolation, capacity_blocks NULLS FIRST, bucket_start

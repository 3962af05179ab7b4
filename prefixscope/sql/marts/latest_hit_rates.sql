-- The newest result for each (tenant, policy and options, isolation, capacity, window), counting
-- only simulations that succeeded after the last successful ingest: a report never mixes in
-- results computed on data the warehouse no longer holds.
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
),
ranked AS (
    SELECT h.*, r.finished_at,
           row_number() OVER (
               PARTITION BY h.tenant, h.policy, h.policy_options, h.isolation, h.capacity_blocks,
                            h.measure_window
               ORDER BY r.finished_at DESC, h.run_id DESC
           ) AS newest
    FROM hit_rates h
    JOIN runs r USING (run_id)
    WHERE r.status = 'succeeded' AND r.finished_at >= (SELECT finished FROM last_ingest)
)
SELECT * EXCLUDE (newest, finished_at)
FROM ranked
WHERE newest = 1
ORDER BY measure_window, isolation, tenant <> '*', tenant, policy, policy_options,
         capacity_blocks NULLS FIRST

-- The newest curve for each (policy, isolation, window, method, sample rate, sample_by), counting
-- only curve runs that succeeded after the last successful ingest, as latest_hit_rates does.
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
),
newest AS (
    SELECT m.policy, m.isolation, m.measure_window, m.method, m.sample_rate, m.sample_by,
           arg_max(m.run_id, r.finished_at) AS run_id
    FROM mrc m
    JOIN runs r USING (run_id)
    WHERE r.status = 'succeeded' AND r.finished_at >= (SELECT finished FROM last_ingest)
    GROUP BY ALL
)
SELECT m.*
FROM mrc m
JOIN newest n
    ON m.run_id = n.run_id AND m.policy = n.policy AND m.isolation = n.isolation
   AND m.measure_window = n.measure_window AND m.method = n.method
   AND m.sample_rate = n.sample_rate AND m.sample_by IS NOT DISTINCT FROM n.sample_by
ORDER BY m.measure_window, m.policy, m.isolation, m.sample_rate DESC, m.tenant <> '*',
         m.tenant, m.capacity_blocks

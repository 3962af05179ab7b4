-- The newest curve for each (policy, isolation, window, method, sample rate), counting only
-- curve runs that succeeded after the last successful ingest, as latest_hit_rates does.
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
),
newest AS (
    SELECT m.policy, m.isolation, m.measure_window, m.method, m.sample_rate,
           arg_max(m.run_id, r.finished_at) AS run_id
    FROM mrc m
    JOIN runs r USING (run_id)
    WHERE r.status = 'succeeded' AND r.finished_at >= (SELECT finished FROM last_ingest)
    GROUP BY ALL
)
SELECT m.*
FROM mrc m
JOIN newest n USING (run_id, policy, isolation, measure_window, method, sample_rate)
ORDER BY m.measure_window, m.policy, m.isolation, m.sample_rate DESC, m.tenant <> '*',
         m.tenant, m.capacity_blocks

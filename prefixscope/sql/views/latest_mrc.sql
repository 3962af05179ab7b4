-- The newest fresh curve for each (policy, isolation, window, method, sample rate, sample_by):
-- every row (tenant, capacity) of that curve's newest fresh run (the freshness rule of
-- fresh_runs).
SELECT m.*
FROM mrc m
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY m.policy, m.isolation, m.measure_window, m.method, m.sample_rate, m.sample_by
)
ORDER BY m.measure_window, m.policy, m.isolation, m.sample_rate DESC, m.tenant <> '*',
         m.tenant, m.capacity_blocks

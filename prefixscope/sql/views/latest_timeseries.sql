-- The fleet's token hit rate per time bucket: for each (tenant, policy, isolation, capacity),
-- the buckets of the newest fresh run that wrote that configuration (the freshness rule of
-- fresh_runs, as latest_hit_rates applies it).
SELECT t.run_id, t.policy, t.isolation, t.capacity_blocks, t.bucket_start, t.token_hit_rate,
       t.requests
FROM hit_rate_timeseries t
JOIN fresh_runs f USING (run_id)
WHERE t.tenant = '*'
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY t.tenant, t.policy, t.isolation, t.capacity_blocks
)
ORDER BY t.policy, t.isolation, t.capacity_blocks NULLS FIRST, t.bucket_start

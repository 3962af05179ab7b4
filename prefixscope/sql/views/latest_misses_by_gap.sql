-- Missed tokens by gap: for each (tenant, policy, isolation, capacity), the buckets of the
-- newest fresh run that wrote that configuration (the freshness rule of fresh_runs).
SELECT m.*
FROM misses_by_gap m
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY m.tenant, m.policy, m.isolation, m.capacity_blocks
)
ORDER BY m.isolation, m.tenant <> '*', m.tenant, m.policy, m.capacity_blocks NULLS FIRST,
         m.gap_low_s NULLS FIRST, m.gap_bucket <> 'no session', m.subagent

-- The newest fresh result for each (tenant, policy and options, isolation, capacity, block
-- size, window):
-- the freshness rule of fresh_runs.
SELECT h.*
FROM hit_rates h
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY h.tenant, h.policy, h.policy_options, h.isolation, h.capacity_blocks,
                 h.block_size, h.measure_window
)
ORDER BY measure_window, isolation, tenant <> '*', tenant, policy, policy_options,
         block_size, capacity_blocks NULLS FIRST

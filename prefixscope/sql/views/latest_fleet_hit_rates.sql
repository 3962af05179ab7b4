-- The newest fresh result for each (tenant, router, replicas, capacity, policy, load scale,
-- model, gpu, window): the freshness rule of fresh_runs.
SELECT h.*
FROM fleet_hit_rates h
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY h.tenant, h.router, h.replicas, h.capacity_blocks, h.policy, h.load_scale,
                 h.model, h.gpu, h.measure_window
)
ORDER BY measure_window, tenant <> '*', tenant, replicas, capacity_blocks, load_scale, router

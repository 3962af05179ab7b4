-- The newest fresh result for each (tenant, router, replicas, capacity, policy, load scale,
-- tiers, model, gpu, deployment, engine, router delay, window): the freshness rule of
-- fresh_runs.
SELECT h.*
FROM fleet_hit_rates h
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY h.tenant, h.router, h.replicas, h.capacity_blocks, h.policy, h.load_scale,
                 h.dram_blocks, h.dram_gbps, h.store_blocks, h.store_unbounded, h.store_gbps,
                 h.model, h.gpu, h.deployment, h.engine, coalesce(h.router_delay_ms, 0),
                 h.measure_window
)
ORDER BY measure_window, tenant <> '*', tenant, replicas, capacity_blocks, dram_blocks,
         store_unbounded, store_blocks, load_scale, router, router_delay_ms

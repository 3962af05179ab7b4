-- The miss budget of each fleet configuration: for each (tenant, router, replicas, capacity,
-- policy, load scale, tiers, model, gpu, deployment, engine, router delay, window), the parts
-- of the newest fresh run that wrote that configuration (the freshness rule of fresh_runs).
SELECT m.*
FROM miss_budget m
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY m.tenant, m.router, m.replicas, m.capacity_blocks, m.policy, m.load_scale,
                 m.dram_blocks, m.dram_gbps, m.store_blocks, m.store_unbounded, m.store_gbps,
                 m.model, m.gpu, m.deployment, m.engine, coalesce(m.router_delay_ms, 0),
                 m.measure_window
)
ORDER BY measure_window, tenant <> '*', tenant, replicas, capacity_blocks, dram_blocks,
         store_unbounded, store_blocks, load_scale, router, router_delay_ms, engine, part

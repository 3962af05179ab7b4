-- Each replica of the newest fresh run of each fleet configuration (router, replicas,
-- capacity, policy, load scale, tiers, deployment, engine, router delay): the freshness rule
-- of fresh_runs.
SELECT r.*
FROM fleet_replicas r
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY r.router, r.replicas, r.capacity_blocks, r.policy, r.load_scale,
                 r.dram_blocks, r.store_blocks, r.store_unbounded, r.deployment, r.engine,
                 coalesce(r.router_delay_ms, 0)
)
ORDER BY replicas, capacity_blocks, load_scale, router, router_delay_ms, replica

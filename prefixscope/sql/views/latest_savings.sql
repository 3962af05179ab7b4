-- What the cache saves, newest fresh result for each (tenant, policy, isolation, capacity,
-- model, gpu, deployment, cost model) (the freshness rule of fresh_runs), with its cost
-- model's held-out error. Newest configuration first; within one, the fleet, then tenants by name.
SELECT s.*, m.holdout_median_abs_pct_err, m.holdout_p90_abs_pct_err, m.roofline_share,
       m.device AS cost_model_device
FROM savings s
JOIN fresh_runs f USING (run_id)
LEFT JOIN miss_cost_models m ON m.run_id = s.cost_model_run_id AND m.model = s.model
QUALIFY f.recency = min(f.recency) OVER (
    PARTITION BY s.tenant, s.policy, s.isolation, s.capacity_blocks, s.model, s.gpu,
                 s.deployment, s.cost_model
)
ORDER BY f.recency, s.policy, s.isolation, s.capacity_blocks NULLS FIRST, s.model, s.gpu,
         s.cost_model, s.tenant <> '*', s.tenant

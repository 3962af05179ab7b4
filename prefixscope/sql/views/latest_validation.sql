-- The newest fresh validate run of each policy (the freshness rule of fresh_runs): its
-- agreement rows, the fleet ('*') first.
SELECT v.*
FROM validation v
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (PARTITION BY v.policy)
ORDER BY v.policy, v.tenant <> '*', v.tenant

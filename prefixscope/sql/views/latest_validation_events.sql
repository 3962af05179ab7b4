-- The newest fresh validate --events run of each pool model (the freshness rule of
-- fresh_runs): its rows per rank and capacity, the best capacity of each rank first.
SELECT v.*
FROM validation_events v
JOIN fresh_runs f USING (run_id)
QUALIFY f.recency = min(f.recency) OVER (PARTITION BY v.model)
ORDER BY v.model, v.rank, NOT v.best, v.capacity_blocks

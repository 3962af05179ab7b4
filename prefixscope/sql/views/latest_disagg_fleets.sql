-- The rows of the newest fresh disagg run: its disaggregated fleet and the colocated fleet of
-- the same GPUs are one comparison, so they are read from one run.
SELECT d.*
FROM disagg_fleets d
JOIN fresh_runs f USING (run_id)
WHERE f.recency = (
    SELECT min(f2.recency) FROM fresh_runs f2 WHERE f2.command = 'disagg'
)
ORDER BY layout DESC

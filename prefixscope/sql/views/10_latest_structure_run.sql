-- The newest fresh `structure` run (the freshness rule of fresh_runs; a structure run has no
-- configuration key: its tables describe the trace together). Every latest_<structure table>
-- view reads its rows under this run_id. Named 10_... so it is created before those views.
SELECT run_id
FROM fresh_runs
WHERE run_id IN (SELECT run_id FROM session_stats)
ORDER BY recency
LIMIT 1

-- shared_prefixes of the latest structure run (latest_structure_run: the freshness rule of
-- fresh_runs), by rank.
SELECT *
FROM shared_prefixes
WHERE run_id = (SELECT run_id FROM latest_structure_run)
ORDER BY rank

-- session_stats of the latest structure run (latest_structure_run: the freshness rule of
-- fresh_runs): the fleet, then tenants by name.
SELECT *
FROM session_stats
WHERE run_id = (SELECT run_id FROM latest_structure_run)
ORDER BY tenant <> '*', tenant

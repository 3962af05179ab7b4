-- hit_sources of the latest structure run (latest_structure_run: the freshness rule of
-- fresh_runs): per configuration (the infinite cache first), the fleet, then tenants by name.
SELECT *
FROM hit_sources
WHERE run_id = (SELECT run_id FROM latest_structure_run)
ORDER BY capacity_blocks NULLS FIRST, policy, tenant <> '*', tenant

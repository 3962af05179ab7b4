-- agent_sessions of the latest structure run (latest_structure_run): tenants by name, then
-- sessions in the order they started.
SELECT *
FROM agent_sessions
WHERE run_id = (SELECT run_id FROM latest_structure_run)
ORDER BY tenant, first_ts, session

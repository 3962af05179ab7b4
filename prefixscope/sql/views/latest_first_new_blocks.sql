-- first_new_blocks of the latest structure run (latest_structure_run: the freshness rule of
-- fresh_runs): the fleet, then tenants by name; per tenant the requests with no new block
-- first, then bins by position.
SELECT *
FROM first_new_blocks
WHERE run_id = (SELECT run_id FROM latest_structure_run)
ORDER BY tenant <> '*', tenant, from_block NULLS FIRST

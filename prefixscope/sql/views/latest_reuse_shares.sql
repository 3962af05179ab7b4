-- reuse_shares of the latest structure run (latest_structure_run: the freshness rule of
-- fresh_runs).
SELECT *
FROM reuse_shares
WHERE run_id = (SELECT run_id FROM latest_structure_run)
ORDER BY tenant <> '*', tenant, request_kind <> '*', request_kind

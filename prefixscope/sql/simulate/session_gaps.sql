-- Per request in replay order ({replay_order}, trace/load.py): whether it names a session, the
-- seconds since the previous request of its session (tenant and session: the same name in two
-- tenants is two sessions; NULL for a session's first), and whether it is a sub-agent's
-- (a parent session named). analysis/simulation/gaps.py buckets them.
SELECT request_id,
       session_id IS NOT NULL AS has_session,
       CASE WHEN session_id IS NOT NULL THEN
           (epoch_us(arrival_ts) - lag(epoch_us(arrival_ts)) OVER (
               PARTITION BY tenant, session_id ORDER BY arrival_ts, source.file, source.line
           )) / 1e6
       END AS gap_s,
       parent_session_id IS NOT NULL AS subagent
FROM requests
ORDER BY {replay_order}

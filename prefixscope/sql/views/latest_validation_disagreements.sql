-- The requests that disagree most, of the newest fresh validate run of each policy (the runs
-- of latest_validation), with the arrival time and the log's own request id from requests.
SELECT d.*, r.arrival_ts, r.log_request_id
FROM validation_disagreements d
JOIN fresh_runs f USING (run_id)
LEFT JOIN requests r USING (request_id)
QUALIFY f.recency = min(f.recency) OVER (PARTITION BY d.policy)
ORDER BY d.policy, d.rank

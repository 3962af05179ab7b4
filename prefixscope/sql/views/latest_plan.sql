-- The rows of the newest fresh plan run: a plan answers together (its configuration rows and
-- capacity rows share one target and window), so it is read from one run.
SELECT p.*
FROM plan p
JOIN fresh_runs f USING (run_id)
WHERE f.recency = (
    SELECT min(f2.recency) FROM fresh_runs f2 WHERE f2.command = 'plan'
)
ORDER BY kind, tenant <> '*', tenant, policy

-- When each command last succeeded (epoch seconds), from the runs table.
SELECT command, epoch(max(finished_at)) AS finished
FROM runs
WHERE status = 'succeeded'
GROUP BY command
ORDER BY command

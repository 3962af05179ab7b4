-- Every configuration that has request_outcomes from a succeeded run, newest run first.
SELECT o.run_id, o.policy, o.isolation, o.capacity_blocks, count(*) AS requests
FROM request_outcomes o
JOIN runs r USING (run_id)
WHERE r.status = 'succeeded'
GROUP BY o.run_id, o.policy, o.isolation, o.capacity_blocks, r.finished_at
ORDER BY r.finished_at DESC, o.run_id DESC, o.policy, o.isolation, o.capacity_blocks

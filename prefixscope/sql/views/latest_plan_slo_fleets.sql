-- Every fleet of the newest fresh SLO search (plan-slo run): a search is read from one run,
-- as its answers are (latest_plan_slo_answers). Cheapest first within each load and caching.
SELECT p.*
FROM plan_slo_fleets p
JOIN fresh_runs f USING (run_id)
WHERE f.recency = (
    SELECT min(f2.recency) FROM fresh_runs f2 WHERE f2.command = 'plan-slo'
)
ORDER BY load_scale, NOT prefix_caching, usd_per_hour, ttft_p95_s

-- Each window sized alone in the newest fresh SLO search (plan-slo run with --per-window), in
-- time order within each load and caching.
SELECT p.*
FROM plan_slo_windows p
JOIN fresh_runs f USING (run_id)
WHERE f.recency = (
    SELECT min(f2.recency) FROM fresh_runs f2 WHERE f2.command = 'plan-slo'
)
ORDER BY load_scale, NOT prefix_caching, window_start_s

-- The answers of the newest fresh SLO search (plan-slo run), caching on before off per load.
SELECT p.*
FROM plan_slo_answers p
JOIN fresh_runs f USING (run_id)
WHERE f.recency = (
    SELECT min(f2.recency) FROM fresh_runs f2 WHERE f2.command = 'plan-slo'
)
ORDER BY load_scale, NOT prefix_caching

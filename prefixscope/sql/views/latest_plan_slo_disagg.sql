-- The disaggregated answers of the newest fresh plan-slo run that searched them: a search is
-- read from one run.
SELECT d.*
FROM plan_slo_disagg d
JOIN fresh_runs f USING (run_id)
WHERE f.recency = (
    SELECT min(f2.recency) FROM fresh_runs f2 JOIN plan_slo_disagg d2 USING (run_id)
    WHERE f2.command = 'plan-slo'
)
ORDER BY load_scale

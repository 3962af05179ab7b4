-- The newest succeeded savings run that finished after the last successful ingest (a page never
-- shows savings computed on data the warehouse no longer holds), with its cost model's error.
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
),
newest AS (
    SELECT s.run_id
    FROM savings s JOIN runs r USING (run_id)
    WHERE r.status = 'succeeded' AND r.finished_at >= (SELECT finished FROM last_ingest)
    ORDER BY r.finished_at DESC, s.run_id DESC
    LIMIT 1
)
SELECT s.*, m.holdout_median_abs_pct_err, m.holdout_p90_abs_pct_err, m.roofline_share,
       m.device AS cost_model_device
FROM savings s
LEFT JOIN miss_cost_models m ON m.run_id = s.cost_model_run_id AND m.model = s.model
WHERE s.run_id = (SELECT run_id FROM newest)
ORDER BY s.tenant <> '*', s.tenant

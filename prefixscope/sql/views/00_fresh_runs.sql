-- The runs every latest_* view may read: runs that succeeded and finished at or after the last
-- successful ingest, so a page never mixes in results computed on data the warehouse no longer
-- holds. recency 1 is the newest (latest finished_at; a tie goes to the greater run_id).
--
-- The one freshness rule of every latest_* view: for each configuration key of the view, the
-- rows of the newest fresh run that wrote rows for that key. Each view names its key:
--   latest_hit_rates   (tenant, policy, policy_options, isolation, capacity_blocks, block_size,
--                      measure_window)
--   latest_timeseries  (tenant, policy, isolation, capacity_blocks), fleet rows only
--   latest_mrc         (policy, isolation, measure_window, method, sample_rate, sample_by)
--   latest_savings     (tenant, policy, isolation, capacity_blocks, model, gpu, cost_model)
--   latest_fleet_hit_rates (tenant, router, replicas, capacity_blocks, policy, load_scale,
--                      model, gpu, deployment, engine, router_delay_ms, measure_window)
--   latest_fleet_replicas  (router, replicas, capacity_blocks, policy, load_scale, deployment, engine,
--                      router_delay_ms)
--   latest_miss_budget     latest_fleet_hit_rates' key, one row a part
--   latest_structure_run  no key: a structure run's tables describe the trace together, so the
--                      page reads all of them from one run (the latest_<structure table> views).
-- The file is named 00_fresh_runs.sql so it is created before the views that read it; the
-- view is named fresh_runs.
WITH last_ingest AS (
    SELECT coalesce(max(finished_at), TIMESTAMPTZ '1970-01-01') AS finished
    FROM runs WHERE command = 'ingest' AND status = 'succeeded'
)
SELECT run_id, command, started_at, finished_at,
       row_number() OVER (ORDER BY finished_at DESC, run_id DESC) AS recency
FROM runs
WHERE status = 'succeeded' AND finished_at >= (SELECT finished FROM last_ingest)
ORDER BY recency

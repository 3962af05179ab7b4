-- The SLO planner's answer (latest_plan_slo_answers, when the warehouse has the view): one row
-- per load scale and prefix caching on or off.
SELECT printf('%g', load_scale)                         AS load_scale,
       CASE WHEN prefix_caching THEN 'true' ELSE 'false' END AS prefix_caching,
       coalesce(slo, '')                                AS slo,
       coalesce(deployment, '')                         AS deployment,
       coalesce(router, '')                             AS router,
       CASE WHEN met THEN 1 ELSE 0 END                  AS met,
       replicas,
       gpus,
       usd_per_hour,
       ttft_p95_s,
       gpus_saved,
       usd_saved_per_month
FROM latest_plan_slo_answers

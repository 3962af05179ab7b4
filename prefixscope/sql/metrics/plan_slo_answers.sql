-- The SLO planner's answer (latest_plan_slo_answers, when the warehouse has the view): one row
-- per load scale and prefix caching on or off.
-- A load scale's label is its shortest form ('%g') where that reads back as the same number,
-- else its exact digits, so two scales never share one series.
SELECT CASE WHEN printf('%g', load_scale)::DOUBLE = load_scale THEN printf('%g', load_scale)
            ELSE load_scale::VARCHAR END                AS load_scale,
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

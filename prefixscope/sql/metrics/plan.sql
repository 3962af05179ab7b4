-- The planner's answer (latest_plan): per kind (capacity, configuration), tenant and policy.
SELECT kind,
       tenant,
       policy,
       measure_window                                   AS "window",
       capacity_blocks,
       capacity_gib * 1073741824                        AS capacity_bytes,
       token_hit_rate,
       target_token_hit_rate,
       CASE WHEN reached THEN 1 ELSE 0 END              AS reached,
       replicas,
       gpus,
       cost_per_hour,
       ttft_p95_s
FROM latest_plan

-- What the cache saves (latest_savings), keyed as the view is.
SELECT tenant,
       policy,
       isolation,
       coalesce(capacity_blocks::VARCHAR, 'unbounded')  AS capacity_blocks,
       model,
       gpu,
       cost_model,
       coalesce(deployment, '')                         AS deployment,
       gpu_seconds_saved_per_hour,
       usd_saved_per_hour,
       saved_share,
       ttft_p95_no_cache_s,
       ttft_p95_with_cache_s
FROM latest_savings

-- A warehouse's newest savings (latest_savings), keyed as the view is, for
-- `prefixscope compare`: '' for no deployment, -1 for an unbounded capacity.
SELECT tenant,
       policy,
       isolation,
       coalesce(capacity_blocks, -1)  AS capacity_blocks,
       model,
       gpu,
       coalesce(deployment, '')       AS deployment,
       cost_model,
       prefill_gpu_seconds_with_cache,
       gpu_seconds_saved_per_hour,
       ttft_p50_with_cache_s,
       ttft_p95_with_cache_s
FROM latest_savings

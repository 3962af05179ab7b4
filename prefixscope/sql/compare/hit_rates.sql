-- A warehouse's newest hit rates (latest_hit_rates), keyed as the view is, for
-- `prefixscope compare`: '' for no policy options, -1 for the ceiling's unbounded capacity, so
-- the keys of two warehouses join.
SELECT tenant,
       policy,
       coalesce(policy_options, '')   AS policy_options,
       isolation,
       coalesce(capacity_blocks, -1)  AS capacity_blocks,
       block_size,
       measure_window,
       token_hit_rate,
       ceiling_token_hit_rate
FROM latest_hit_rates

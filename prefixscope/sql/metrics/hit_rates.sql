-- The hit rates of latest_hit_rates, one sample per row: its key (the view's) as labels, in
-- the text a label holds ('' for none; capacity 'unbounded' for the ceiling's NULL).
SELECT tenant,
       policy,
       coalesce(policy_options, '')                        AS policy_options,
       isolation,
       coalesce(capacity_blocks::VARCHAR, 'unbounded')     AS capacity_blocks,
       block_size::VARCHAR                                 AS block_size,
       measure_window                                      AS "window",
       token_hit_rate,
       request_hit_rate,
       ceiling_token_hit_rate,
       capacity_blocks                                     AS capacity,
       capacity_gib * 1073741824                           AS capacity_bytes
FROM latest_hit_rates

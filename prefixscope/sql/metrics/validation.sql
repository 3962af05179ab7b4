-- The effective capacity of latest_validation (one row per policy and tenant): the capacity
-- that explains the engines' reported cached tokens, with its range.
SELECT tenant,
       policy,
       capacity_blocks,
       capacity_low_blocks,
       capacity_high_blocks,
       capacity_gib * 1073741824       AS capacity_bytes,
       reported_hit_tokens::DOUBLE / nullif(input_tokens, 0)   AS reported_token_hit_rate
FROM latest_validation

-- The requests validate --events replays, in arrival order: epoch seconds, token counts and
-- the full prompt blocks' prefixscope ids.
SELECT epoch(arrival_ts) AS arrival_s, input_tokens, coalesce(output_tokens, 0) AS output_tokens,
       block_hashes, block_size
FROM requests
ORDER BY arrival_ts, request_id

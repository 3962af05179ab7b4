-- One row describing what the warehouse holds: the trace every figure is measured on.
SELECT
    (SELECT count(*) FROM requests)                              AS requests,
    (SELECT count(*) FROM rejects)                               AS rejected_lines,
    (SELECT count(*) FROM sources)                               AS files,
    (SELECT count(DISTINCT tenant) FROM requests)                AS tenants,
    (SELECT coalesce(sum(input_tokens), 0) FROM requests)        AS input_tokens,
    (SELECT coalesce(sum(output_tokens), 0) FROM requests)       AS output_tokens,
    (SELECT coalesce(sum(len(block_hashes)), 0) FROM requests)   AS block_lookups,
    (SELECT count(DISTINCT h) FROM (SELECT unnest(block_hashes) AS h FROM requests)) AS unique_blocks,
    (SELECT string_agg(DISTINCT block_size::VARCHAR, ', ') FROM requests) AS block_sizes,
    (SELECT max(block_size) FROM requests)                       AS max_block_size,
    (SELECT min(arrival_ts) FROM requests)                       AS first_arrival,
    (SELECT max(arrival_ts) FROM requests)                       AS last_arrival,
    -- the keys its block hashes were stored under: fingerprints, 'none' for plain hashes
    (SELECT string_agg(DISTINCT coalesce(hash_key, 'none'), ', ' ORDER BY coalesce(hash_key, 'none'))
     FROM sources)                                               AS hash_keys

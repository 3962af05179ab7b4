-- mooncake_fast.sql, with the tenant field (--tenant-field) read in the same parse.
-- In: view `batch(line, raw)`; $structure (the four fields and the tenant path's first key,
-- each as "JSON"), $tenant_key (that first key), $tenant_rest (the JSON Pointer of the rest of
-- the path under it; `$` when the path is that one key), $max_line_bytes. The key and the
-- pointer are bound parameters: a path is data, never SQL text.
-- Out: as mooncake_fast.sql, plus `tenant`: the raw JSON at the tenant path (NULL when absent).
WITH fields AS MATERIALIZED (
    SELECT line, try(json_transform(try(decode(raw)), $structure)) AS f
    FROM batch
    WHERE octet_length(raw) <= $max_line_bytes
)
SELECT line,
       f.timestamp::VARCHAR AS timestamp,
       f.input_length::VARCHAR AS input_length,
       f.output_length::VARCHAR AS output_length,
       f.hash_ids::VARCHAR AS hash_ids,
       CASE WHEN $tenant_rest = '$' THEN struct_extract(f, $tenant_key)
            ELSE json_extract(struct_extract(f, $tenant_key), $tenant_rest)
       END::VARCHAR AS tenant
FROM fields
WHERE f.timestamp IS NOT NULL AND f.input_length IS NOT NULL
  AND f.output_length IS NOT NULL AND f.hash_ids IS NOT NULL

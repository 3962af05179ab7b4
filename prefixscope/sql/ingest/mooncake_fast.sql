-- Fast path for Mooncake lines, step one: each line is parsed once, into the raw JSON of just the
-- four fields (and the tenant field, when --tenant-field maps one); whatever else the line
-- carries (extra fields of any type, any key order) is skipped by the parser, not inspected. The
-- same JSON parser as mooncake.sql reads the line, so both see the same values: the first of
-- duplicate keys wins in both, escaped keys match unescaped, raw values come back minified.
-- prefixscope.ingest.formats.plain then keeps the lines whose values are plain; any other line
-- is left to mooncake.sql, the authority.
-- In: view `batch(line, raw)`; $structure (json_transform's structure: the four fields and,
-- with a tenant field, its path's first key, each as "JSON"); $tenant_key (that first key;
-- without a tenant field, any key of the structure, unused); $tenant_rest (the JSON Pointer of
-- the rest of the path under it; `$` when the path is that one key); $has_tenant;
-- $max_line_bytes. The key and the pointer are bound parameters: a path is data, never SQL text.
-- Out: `line`, the raw JSON text of each field, for the lines that have all four (not null),
-- `block_size`: the raw JSON of the line's own block size (NULL when absent), and `tenant`:
-- the raw JSON at the tenant path (NULL when absent, or without a tenant field).
-- MATERIALIZED: else the parse is repeated for every field taken out of its result.
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
       f.block_size::VARCHAR AS block_size,
       CASE WHEN NOT $has_tenant THEN NULL
            WHEN $tenant_rest = '$' THEN struct_extract(f, $tenant_key)
            ELSE json_extract(struct_extract(f, $tenant_key), $tenant_rest)
       END::VARCHAR AS tenant
FROM fields
WHERE f.timestamp IS NOT NULL AND f.input_length IS NOT NULL
  AND f.output_length IS NOT NULL AND f.hash_ids IS NOT NULL

-- Fast path for Mooncake lines, step one: each line is parsed once, into the raw JSON of just the
-- four fields; whatever else the line carries (extra fields of any type, any key order) is
-- skipped by the parser, not inspected. The same JSON parser as mooncake.sql reads the line, so
-- both see the same values: the first of duplicate keys wins in both, escaped keys match
-- unescaped, raw values come back minified.
-- prefixscope.ingest.formats.plain then keeps the lines whose values are plain; any other line
-- is left to mooncake.sql, the authority. mooncake_fast_tenant.sql is this with a tenant field.
-- In: view `batch(line, raw)`; $structure (json_transform's structure: the four fields, each as
-- "JSON"), $max_line_bytes.
-- Out: `line` and the raw JSON text of each field, for the lines that have all four (not null).
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
       f.hash_ids::VARCHAR AS hash_ids
FROM fields
WHERE f.timestamp IS NOT NULL AND f.input_length IS NOT NULL
  AND f.output_length IS NOT NULL AND f.hash_ids IS NOT NULL

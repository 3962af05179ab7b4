-- Fast path for Mooncake lines whose four fields (and the tenant field, when one is mapped) hold
-- plain values: non-negative integers or decimals without exponent, an array of such integers,
-- a string or integer tenant. Each line is parsed once, into the raw JSON of just those fields;
-- whatever else the line carries (extra fields of any type, any key order) is skipped by the
-- parser, not inspected. Any other line is left to mooncake.sql, the authority.
-- Everything accepted here is accepted there with the same values: the same JSON parser reads
-- the line (the first of duplicate keys wins in both, escaped keys match unescaped), and each
-- raw value passes a shape that mooncake.sql accepts with its type.
-- In: view `batch(line, raw)`; $structure (json_transform's structure: the four fields and the
-- tenant path, each as "JSON"), $tenant_field (a tenant path is mapped), $block_size,
-- $max_line_bytes, $start, $tenant, $min_us, $max_us (a timestamp landing outside
-- [$min_us, $max_us) is left to mooncake.sql, which rejects it). `f.tenant_path` is replaced by
-- the struct access of the mapped path (NULL::JSON when none is).
-- Out: the stage columns of prefixscope.ingest.formats.base.STAGE_SCHEMA that Mooncake fills.
WITH fields AS (
    SELECT line, try(json_transform(try(decode(raw)), $structure)) AS f
    FROM batch
    WHERE octet_length(raw) <= $max_line_bytes
),
raw AS (
    SELECT line,
           f.timestamp::VARCHAR AS ts,
           f.input_length::VARCHAR AS input_length,
           f.output_length::VARCHAR AS output_length,
           f.hash_ids AS hash_ids,
           f.tenant_path::VARCHAR AS tenant
    FROM fields
    WHERE f IS NOT NULL
),
plain AS (
    SELECT line, ts, input_length, output_length, hash_ids,
           CASE WHEN NOT $tenant_field THEN $tenant::VARCHAR
                WHEN starts_with(tenant, '"') THEN tenant::JSON ->> '$'
                WHEN regexp_full_match(tenant, '-?[0-9]{1,18}') THEN tenant END AS tenant
    FROM raw
    WHERE regexp_full_match(ts, '[0-9]{1,15}(\.[0-9]{1,9})?')
      AND regexp_full_match(input_length, '[0-9]{1,15}')
      AND regexp_full_match(output_length, '[0-9]{1,15}')
      AND regexp_full_match(hash_ids::VARCHAR, '\[[0-9]{1,19}(,[0-9]{1,19})*\]')
),
parsed AS (
    SELECT line, tenant,
           CAST(ts AS DOUBLE) AS timestamp,
           CAST(input_length AS BIGINT) AS input_length,
           CAST(output_length AS BIGINT) AS output_length,
           CAST(hash_ids AS UBIGINT[]) AS hash_ids
    FROM plain
    WHERE tenant IS NOT NULL
)
SELECT line,
       CAST(NULL AS VARCHAR) AS reason,
       CAST(NULL AS VARCHAR) AS detail,
       $start::TIMESTAMPTZ + to_microseconds(CAST(round(timestamp * 1000) AS BIGINT))
           AS arrival_ts,
       tenant,
       input_length AS input_tokens,
       output_length AS output_tokens,
       $block_size::INTEGER AS block_size,
       hash_ids AS block_hashes
FROM parsed
WHERE input_length > 0
  AND len(hash_ids) = (input_length + $block_size - 1) // $block_size
  AND epoch_us($start::TIMESTAMPTZ) + timestamp * 1000.0 >= $min_us
  AND epoch_us($start::TIMESTAMPTZ) + timestamp * 1000.0 < $max_us

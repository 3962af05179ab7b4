-- Fast path for Mooncake lines in their canonical shape: the four fields in file order, plain
-- non-negative numbers, no other content. Such a line is parsed once; any other line (another
-- key order, extra fields, exponents, bad values...) is left to mooncake.sql, the authority.
-- Everything accepted here is accepted there too (the shape below is a strict subset).
-- In: view `batch(line, raw)`; $block_size, $max_line_bytes, $start, $tenant, $min_us, $max_us
-- (a timestamp landing outside [$min_us, $max_us) is left to mooncake.sql, which rejects it).
-- Out: the stage columns of prefixscope.ingest.formats.base.STAGE_SCHEMA that Mooncake fills.
WITH canonical AS (
    SELECT line, decode(raw) AS text
    FROM batch
    WHERE octet_length(raw) <= $max_line_bytes
      AND regexp_full_match(try(decode(raw)),
          '\s*\{\s*"timestamp"\s*:\s*[0-9]{1,15}(\.[0-9]{1,9})?\s*,'
          || '\s*"input_length"\s*:\s*[0-9]{1,15}\s*,'
          || '\s*"output_length"\s*:\s*[0-9]{1,15}\s*,'
          || '\s*"hash_ids"\s*:\s*\[\s*[0-9]{1,19}(\s*,\s*[0-9]{1,19})*\s*\]\s*\}\s*')
),
parsed AS (
    SELECT line, try(json_transform_strict(text,
        '{"timestamp": "DOUBLE", "input_length": "BIGINT", "output_length": "BIGINT",
          "hash_ids": "UBIGINT[]"}')) AS f
    FROM canonical
)
SELECT line,
       CAST(NULL AS VARCHAR) AS reason,
       CAST(NULL AS VARCHAR) AS detail,
       $start::TIMESTAMPTZ + to_microseconds(CAST(round(f.timestamp * 1000) AS BIGINT))
           AS arrival_ts,
       $tenant::VARCHAR AS tenant,
       f.input_length AS input_tokens,
       f.output_length AS output_tokens,
       $block_size::INTEGER AS block_size,
       f.hash_ids AS block_hashes
FROM parsed
WHERE f.input_length > 0
  AND len(f.hash_ids) = (f.input_length + $block_size - 1) // $block_size
  AND epoch_us($start::TIMESTAMPTZ) + f.timestamp * 1000.0 >= $min_us
  AND epoch_us($start::TIMESTAMPTZ) + f.timestamp * 1000.0 < $max_us

-- Parse one batch of Mooncake JSONL lines.
-- In:  view `batch(line BIGINT, raw BLOB)`; parameters $block_size, $max_line_bytes, $start,
--      $tenant, $min_us, $max_us (the plausible arrival range, epoch microseconds),
--      $tenant_path (the JSON Pointer of --tenant-field, bound like every value from outside;
--      NULL: every row gets $tenant) and $tenant_label (that field as messages name it). A
--      mapped tenant field is required, a string or an integer of at most 18 digits, as in
--      every format that maps one (a longer number is out_of_range, not a type).
--      $full_blocks: the ids name full blocks only (len = floor(input_length / block_size), a
--      token source's rule), or those and one more for the partial tail, which is left out
--      (len = ceil(...), as `prefixscope export` writes a gateway-log warehouse, so replay
--      tools that read Mooncake's rule see every token); else the last block may be partial
--      (len = ceil(...), Mooncake's own rule).
-- Out: one row per input line: `reason` is NULL for an accepted line, else the first rule it
--      breaks (`detail` says how, without quoting the line). Rules, in order:
--      blank_line, line_too_long, invalid_utf8, invalid_json, not_an_object, missing_field,
--      wrong_type, out_of_range, timestamp_out_of_range, block_size_mismatch (the line says a
--      `block_size` other than $block_size: an integer, when it says one), block_count_mismatch.
WITH decoded AS (
    SELECT line,
           octet_length(raw) AS nbytes,
           CASE WHEN octet_length(raw) <= $max_line_bytes THEN try(decode(raw)) END AS text
    FROM batch
),
parsed AS (
    SELECT line, nbytes, text, try(json(text)) AS j
    FROM decoded
),
typed AS (
    SELECT line, nbytes, text, j,
           json_type(j)                   AS t_root,
           json_type(j, '$.timestamp')     AS t_ts,
           json_type(j, '$.input_length')  AS t_in,
           json_type(j, '$.output_length') AS t_out,
           json_type(j, '$.hash_ids')      AS t_ids,
           json_type(j, '$.hash_ids[*]')   AS t_id_items,
           json_type(j, $tenant_path)      AS t_tenant,
           json_type(j, '$.block_size')    AS t_bs
    FROM parsed
),
valued AS (
    SELECT *,
           CASE WHEN t_ts IN ('UBIGINT', 'BIGINT', 'DOUBLE')
                THEN CAST(j ->> '$.timestamp' AS DOUBLE) END                         AS ts_ms,
           CASE WHEN t_in IN ('UBIGINT', 'BIGINT')
                THEN CAST(j ->> '$.input_length' AS BIGINT) END                      AS input_tokens,
           CASE WHEN t_out IN ('UBIGINT', 'BIGINT')
                THEN CAST(j ->> '$.output_length' AS BIGINT) END                     AS output_tokens,
           list_bool_and(list_transform(t_id_items, lambda t: t = 'UBIGINT'))             AS ids_ok,
           len(t_id_items)                                                           AS n_ids,
           CASE WHEN t_tenant = 'VARCHAR' THEN j ->> $tenant_path
                WHEN regexp_full_match(json_extract(j, $tenant_path)::VARCHAR, '-?[0-9]{1,18}')
                THEN json_extract(j, $tenant_path)::VARCHAR END                      AS tenant_value,
           coalesce(t_tenant IN ('UBIGINT', 'BIGINT', 'DOUBLE') AND NOT
               (abs(TRY_CAST(json_extract(j, $tenant_path)::VARCHAR AS DOUBLE)) < 1e18), false)
                                                                             AS tenant_huge,
           CASE WHEN t_bs IN ('UBIGINT', 'BIGINT')
                THEN TRY_CAST(j ->> '$.block_size' AS BIGINT) END                   AS line_block_size
    FROM typed
),
needed AS (
    SELECT *,
           CASE WHEN $full_blocks THEN input_tokens // $block_size
                ELSE (input_tokens + $block_size - 1) // $block_size END          AS blocks_needed
    FROM valued
),
judged AS (
    SELECT *,
        CASE
            WHEN nbytes <= $max_line_bytes AND text IS NOT NULL
                 AND trim(text, E' \t\r\n') = ''                 THEN 'blank_line'
            WHEN nbytes > $max_line_bytes                        THEN 'line_too_long'
            WHEN text IS NULL                                    THEN 'invalid_utf8'
            WHEN j IS NULL                                       THEN 'invalid_json'
            WHEN t_root <> 'OBJECT'                              THEN 'not_an_object'
            WHEN coalesce(t_ts, 'NULL') = 'NULL'
              OR coalesce(t_in, 'NULL') = 'NULL'
              OR coalesce(t_out, 'NULL') = 'NULL'
              OR coalesce(t_ids, 'NULL') = 'NULL'
              OR ($tenant_path IS NOT NULL
                  AND coalesce(t_tenant, 'NULL') = 'NULL')       THEN 'missing_field'
            WHEN ts_ms IS NULL OR input_tokens IS NULL OR output_tokens IS NULL
              OR t_ids <> 'ARRAY' OR NOT coalesce(ids_ok, true)
              OR ($tenant_path IS NOT NULL AND tenant_value IS NULL AND NOT tenant_huge)
                                                                 THEN 'wrong_type'
            WHEN ts_ms < 0 OR input_tokens <= 0 OR output_tokens < 0
              OR ($tenant_path IS NOT NULL AND tenant_huge)      THEN 'out_of_range'
            WHEN NOT isfinite(ts_ms)
              OR epoch_us($start::TIMESTAMPTZ) + ts_ms * 1000.0 < $min_us
              OR epoch_us($start::TIMESTAMPTZ) + ts_ms * 1000.0 >= $max_us
                                                                 THEN 'timestamp_out_of_range'
            WHEN coalesce(t_bs, 'NULL') <> 'NULL'
             AND coalesce(line_block_size <> $block_size, true)    THEN 'block_size_mismatch'
            WHEN n_ids <> blocks_needed
             AND NOT ($full_blocks
                      AND n_ids = (input_tokens + $block_size - 1) // $block_size)
                                                                 THEN 'block_count_mismatch'
        END AS reason
    FROM needed
)
SELECT
    line,
    reason,
    CASE reason
        WHEN 'blank_line' THEN 'the line holds only whitespace'
        WHEN 'line_too_long' THEN format('{} bytes, limit {}', nbytes, $max_line_bytes)
        WHEN 'invalid_utf8' THEN 'the line is not valid UTF-8'
        WHEN 'invalid_json' THEN 'the line is not valid JSON'
        WHEN 'not_an_object' THEN format('a JSON {}, expected an object', lower(t_root))
        WHEN 'missing_field' THEN 'missing or null: ' || array_to_string(list_filter(
            [CASE WHEN coalesce(t_ts, 'NULL') = 'NULL' THEN 'timestamp' END,
             CASE WHEN coalesce(t_in, 'NULL') = 'NULL' THEN 'input_length' END,
             CASE WHEN coalesce(t_out, 'NULL') = 'NULL' THEN 'output_length' END,
             CASE WHEN coalesce(t_ids, 'NULL') = 'NULL' THEN 'hash_ids' END,
             CASE WHEN $tenant_path IS NOT NULL AND coalesce(t_tenant, 'NULL') = 'NULL'
                  THEN $tenant_label END], lambda x: x IS NOT NULL), ', ')
        WHEN 'wrong_type' THEN array_to_string(list_filter(
            [CASE WHEN ts_ms IS NULL THEN format('timestamp is {}, expected a number', t_ts) END,
             CASE WHEN input_tokens IS NULL THEN format('input_length is {}, expected an integer', t_in) END,
             CASE WHEN output_tokens IS NULL THEN format('output_length is {}, expected an integer', t_out) END,
             CASE WHEN t_ids <> 'ARRAY' THEN format('hash_ids is {}, expected an array', t_ids)
                  WHEN NOT coalesce(ids_ok, true) THEN 'hash_ids holds an item that is not a non-negative integer' END,
             CASE WHEN $tenant_path IS NOT NULL AND tenant_value IS NULL AND NOT tenant_huge
                  THEN format('{} is {}, expected a string or an integer', $tenant_label, t_tenant) END],
            lambda x: x IS NOT NULL), '; ')
        WHEN 'out_of_range' THEN array_to_string(list_filter(
            [CASE WHEN ts_ms < 0 THEN 'timestamp < 0' END,
             CASE WHEN input_tokens <= 0 THEN format('input_length = {} <= 0', input_tokens) END,
             CASE WHEN output_tokens < 0 THEN format('output_length = {} < 0', output_tokens) END,
             CASE WHEN $tenant_path IS NOT NULL AND tenant_huge THEN $tenant_label
                  || ' is out of range (an integer of at most 18 digits; write a longer one as a string)' END],
            lambda x: x IS NOT NULL), '; ')
        WHEN 'timestamp_out_of_range' THEN
            'timestamp (milliseconds after --start) is not finite or lands outside 1970-01-01..2100-01-01'
        WHEN 'block_size_mismatch' THEN format(
            'the line says block_size {}; this ingest reads blocks of {} tokens (the first line''s, or --block-size)',
            left(json_extract(j, '$.block_size')::VARCHAR, 40), $block_size)
        WHEN 'block_count_mismatch' THEN format(
            'hash_ids has {} blocks; input_length {} at block size {} needs {}',
            n_ids, input_tokens, $block_size, blocks_needed)
    END AS detail,
    CASE WHEN reason IS NULL THEN $start::TIMESTAMPTZ
        + to_microseconds(CAST(round(ts_ms * 1000) AS BIGINT)) END AS arrival_ts,
    CASE WHEN reason IS NULL THEN
        CASE WHEN $tenant_path IS NULL THEN $tenant::VARCHAR ELSE tenant_value END END AS tenant,
    CASE WHEN reason IS NULL THEN input_tokens END AS input_tokens,
    CASE WHEN reason IS NULL THEN output_tokens END AS output_tokens,
    $block_size::INTEGER AS block_size,
    CASE WHEN reason IS NULL AND $full_blocks THEN true END AS last_token_rule,
    -- with $full_blocks a last id past the full blocks names the partial tail: left out
    CASE WHEN reason IS NULL THEN list_slice(CAST(j -> '$.hash_ids' AS UBIGINT[]), 1,
                                             blocks_needed) END AS block_hashes
FROM judged

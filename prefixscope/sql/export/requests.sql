-- The requests an export writes, in replay order (analysis/trace/load.py: arrival, then file and
-- line), so that a re-ingest of the file replays them in the same order. Every column but the
-- ones an export never writes (ids of the log and of the warehouse, where the line came from):
-- `last_token_rule` is there only in a warehouse brought up to date since it was added.
-- In: $tenants (VARCHAR[], NULL: every tenant).
SELECT * EXCLUDE (request_id, log_request_id, reported_cached_tokens, file_id, source,
                  ingest_run_id, arrival_ts),
       epoch_us(arrival_ts) AS at_us
FROM requests
WHERE $tenants IS NULL OR list_contains($tenants, tenant)
ORDER BY arrival_ts, source.file, source.line

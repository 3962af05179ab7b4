-- The keys the warehouse's block hashes were stored under, but for the sources an ingest
-- replaces ($replaced): fingerprints, 'none' for plain hashes (NULL: written before keys).
SELECT DISTINCT coalesce(hash_key, 'none') AS fingerprint
FROM sources
WHERE NOT list_contains($replaced, file_id)
ORDER BY fingerprint

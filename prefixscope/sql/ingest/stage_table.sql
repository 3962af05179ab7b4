-- Keep one parsed file in the staging file, already in the layout of `requests` (less the run
-- id), so publishing only copies rows: the lock on the warehouse is held for a copy, not for
-- computing. In: view `arrow_stage` (STAGE_SCHEMA rows, one per line read); $file_id, $path,
-- $format. `stage_table` is replaced by the table's name.
CREATE TABLE stage_table AS
SELECT line, reason, detail,
       substr($file_id, 1, 16) || ':' || line AS request_id,
       * EXCLUDE (line, reason, detail),
       $format AS format,
       $file_id AS file_id,
       {'file': $path, 'line': line} AS source
FROM arrow_stage;

-- The engine's GPU-pool events (and its clears) for validate --events, in each rank's order:
-- batch time, then the capture's frame order. key names the engine block (for the blocks
-- without a prefixscope id).
SELECT rank, epoch(ts) AS t, kind, block_id, engine_block_hash AS key, block_size
FROM kv_events
WHERE kind = 'cleared' OR coalesce(medium, 'GPU') = 'GPU'
ORDER BY rank, ts, file_id, frame, event_index, block_index

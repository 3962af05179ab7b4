-- Rows written before GPU-seconds counted every GPU: a replica's time then stood for its
-- whole deployment. Multiplied by the deployment's gpus (NULL: one GPU), once: the unit set
-- marks a row done.
UPDATE fleet_hit_rates
SET prefill_gpu_seconds_no_cache = prefill_gpu_seconds_no_cache * coalesce(gpus, 1),
    prefill_gpu_seconds = prefill_gpu_seconds * coalesce(gpus, 1),
    gpu_seconds_saved_hbm = gpu_seconds_saved_hbm * coalesce(gpus, 1),
    gpu_seconds_saved_dram = gpu_seconds_saved_dram * coalesce(gpus, 1),
    gpu_seconds_saved_store = gpu_seconds_saved_store * coalesce(gpus, 1),
    gpu_seconds_saved_per_hour = gpu_seconds_saved_per_hour * coalesce(gpus, 1),
    gpu_seconds_unit = 'gpu-seconds'
WHERE gpu_seconds_unit IS NULL

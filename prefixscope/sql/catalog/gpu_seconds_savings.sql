-- Rows written before GPU-seconds counted every GPU: one prefill's time then stood for the
-- whole tensor-parallel group. Multiplied by the deployment's gpus (NULL: one GPU), once:
-- the unit set marks a row done.
UPDATE savings
SET prefill_gpu_seconds_no_cache = prefill_gpu_seconds_no_cache * coalesce(gpus, 1),
    prefill_gpu_seconds_with_cache = prefill_gpu_seconds_with_cache * coalesce(gpus, 1),
    gpu_seconds_saved = gpu_seconds_saved * coalesce(gpus, 1),
    gpu_seconds_saved_per_hour = gpu_seconds_saved_per_hour * coalesce(gpus, 1),
    gpu_seconds_unit = 'gpu-seconds'
WHERE gpu_seconds_unit IS NULL

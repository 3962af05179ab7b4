"""Cost: model shapes and GPUs, the analytic roofline of a miss and a hit, the fitted prefill
cost model, and what the cache saves in prefill GPU-seconds and time to first token."""

"""GPU replay: the measured cost of a miss against a hit, with paged attention in torch.

``kv_cache`` (block pools, tables, reference counts), ``model`` (a Llama-architecture decoder
with random weights that prefills through a block table), ``timing`` (warm-up, repeats, median;
CUDA events), ``runner`` (one shape as a miss and as a hit), ``replay`` (sampled requests from
the simulator's outcomes into ``replay_samples`` and a fitted ``miss_cost_models`` row) and
``bench`` (the one-command GPU benchmark, which imports only torch and numpy) with its parts:
``depth`` (a deep model timed on a few layers, scaled by layers), ``budget`` (the time guard),
``summary`` (the figures and the fit), ``provenance`` (device, driver, torch, date) and
``check`` (the GPU check's parts merged into one file, ``benchmarks/gpu_check.sh``). It is the only
subpackage allowed to import torch, the optional extra ``prefixscope[replay]``; nothing else
depends on it.
"""

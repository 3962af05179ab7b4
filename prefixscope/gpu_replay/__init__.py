"""GPU replay: the measured cost of a miss against a hit, with paged attention in torch.

Not built yet. It will replay sampled requests from the simulator's outcomes through a
paged KV cache (full prefill for a miss; t_new new tokens against L cached positions for a hit)
and write the timings to the warehouse. It is the only subpackage allowed to import torch,
which is the optional extra ``prefixscope[replay]``; nothing else depends on it.
"""

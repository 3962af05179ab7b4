"""Run one request shape as a miss and as a hit, and time both.

The miss prefills all ``input`` tokens into a fresh table. The hit forks the first ``cached``
positions of that table (by reference: the prefix is cached exactly as an engine holds it) and
prefills the ``new`` tokens after them. Inputs are prepared before timing, so a repeat rewrites
the same slots with the same values and the timed region holds only the forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape
from prefixscope.analysis.cost.roofline import miss_and_hit
from prefixscope.gpu_replay.kv_cache import BlockTable
from prefixscope.gpu_replay.model import LlamaDecoder, plan, run_all
from prefixscope.gpu_replay.timing import measure

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class ShapeResult:
    input_tokens: int
    new_tokens: int  # of the hit
    cached_tokens: int  # of the hit
    miss_s: float
    hit_s: float
    miss_flops: float  # analytic, as the roofline counts them
    hit_flops: float
    miss_roofline_s: float
    hit_roofline_s: float
    hit_eager_s: float | None = None  # the same hit without its CUDA graph (``eager_hit``)


@dataclass(frozen=True)
class RunnerOptions:
    device: str = "cpu"
    dtype: str = "fp32"
    block_size: int = 16
    chunk: int | None = None  # prefill at most this many tokens per forward
    cuda_graphs: bool = True  # for the hit path, on CUDA only
    eager_hit: bool = False  # with a graphed hit, also time the same hit without the graph
    warmup: int = 1
    repeats: int = 5
    seed: int = 0


class Runner:
    """One model and one KV pool, sized for requests of up to ``max_tokens`` tokens."""

    def __init__(
        self, shape: ModelShape, gpu: GpuSpec, max_tokens: int, options: RunnerOptions
    ) -> None:
        self.shape, self.gpu, self.options = shape, gpu, options
        self.device = torch.device(options.device)
        self.model = LlamaDecoder(
            shape, device=self.device, dtype=DTYPES[options.dtype], seed=options.seed
        )
        # The miss holds every block of a request; the hit adds at most its new tokens' blocks
        # and one copied partial block.
        per_request = math.ceil(max_tokens / options.block_size)
        self.cache = self.model.new_cache(2 * per_request + 2, options.block_size)
        self.max_tokens = max_tokens
        self._gen = torch.Generator().manual_seed(options.seed)

    def run(self, input_tokens: int, hit_tokens: int) -> ShapeResult:
        if not 0 < input_tokens <= self.max_tokens:
            raise ValueError(f"{input_tokens} tokens: this runner holds 1 to {self.max_tokens}")
        new = max(1, input_tokens - hit_tokens)  # a full hit still computes its last token
        cached = input_tokens - new
        o = self.options
        tokens = torch.randint(self.shape.vocab_size, (input_tokens,), generator=self._gen)
        hit_eager_s: float | None = None
        miss_table = BlockTable()
        try:
            miss_parts = plan(self.model, self.cache, miss_table, tokens, o.chunk)
            miss = measure(
                lambda: run_all(self.model, self.cache, miss_parts),
                self.device,
                o.warmup,
                o.repeats,
            )
            hit_table = self.cache.fork(miss_table, cached)
            try:
                hit_parts = plan(self.model, self.cache, hit_table, tokens[cached:], o.chunk)
                eager: Callable[[], object] = lambda: run_all(self.model, self.cache, hit_parts)  # noqa: E731
                graphs = o.cuda_graphs and self.device.type == "cuda"
                step = graphed(eager, self.device) if graphs else eager
                hit = measure(step, self.device, o.warmup, o.repeats)
                if graphs and o.eager_hit:
                    hit_eager_s = measure(eager, self.device, o.warmup, o.repeats).median_s
            finally:
                self.cache.release(hit_table)
        finally:
            self.cache.release(miss_table)
        m, h = miss_and_hit(self.shape, self.gpu, input_tokens, input_tokens - new)
        return ShapeResult(
            input_tokens,
            new,
            cached,
            miss.median_s,
            hit.median_s,
            float(m.flops),
            float(h.flops),
            float(m.seconds),
            float(h.seconds),
            hit_eager_s,
        )


def graphed(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """``fn`` captured once in a CUDA graph; the returned callable replays it (one launch for
    the whole forward, so a short hit is not measured as a string of kernel launches)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):  # warm up on a side stream, as capture requires
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay

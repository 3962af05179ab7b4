"""A model too deep for one GPU, timed on a few of its layers and scaled to all of them.

Every decoder layer of a Llama-architecture model has the same shapes, so it does the same work
on the same request: a prefill through ``N`` of a model's ``L`` layers costs

    T_N = T_0 + N·layer        (T_0: embedding, final norm and LM head, no layer)

and the whole model ``T_L = T_0 + (L / N)·(T_N − T_0)``. Both ``T_N`` and ``T_0`` are measured
for every shape (a zero-layer model is the embedding and the LM head alone), so the part that
does not grow with depth is not multiplied by ``L / N``. What this leaves out: the KV pool and
the weights of ``L`` layers would not fit one GPU, and a real deployment splits them across
several (tensor parallelism adds its all-reduces, which no single-GPU run measures).
"""

from __future__ import annotations

from dataclasses import replace

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape
from prefixscope.analysis.cost.roofline import miss_and_hit
from prefixscope.gpu_replay.runner import ShapeResult


def cut(shape: ModelShape, layers: int) -> ModelShape:
    """The first ``layers`` layers of ``shape`` (0: the embedding and LM head alone)."""
    if not 0 <= layers <= shape.num_hidden_layers:
        raise ValueError(f"{shape.name} has {shape.num_hidden_layers} layers, not {layers}")
    return replace(shape, name=f"{shape.name}[{layers}/{shape.num_hidden_layers}]",
                   num_hidden_layers=layers)  # fmt: skip


def scale(seconds_n: float, seconds_0: float, layers: int, full_layers: int) -> float:
    """``T_L`` from ``T_N`` and ``T_0``; a layer never costs less than nothing (noise)."""
    return seconds_0 + full_layers / layers * max(seconds_n - seconds_0, 0.0)


def to_full_depth(
    full: ModelShape, gpu: GpuSpec, layers: int, cut_result: ShapeResult, head: ShapeResult
) -> ShapeResult:
    """The result ``full`` would give: times scaled from ``layers`` layers, the analytic FLOPs
    and roofline of the whole model."""
    if (cut_result.input_tokens, cut_result.cached_tokens) != (
        head.input_tokens,
        head.cached_tokens,
    ):
        raise ValueError("the layers and the head were timed on different shapes")
    L = full.num_hidden_layers  # noqa: N806
    m, h = miss_and_hit(full, gpu, cut_result.input_tokens, cut_result.cached_tokens)
    eager = None
    if cut_result.hit_eager_s is not None and head.hit_eager_s is not None:
        eager = scale(cut_result.hit_eager_s, head.hit_eager_s, layers, L)
    return ShapeResult(
        cut_result.input_tokens,
        cut_result.new_tokens,
        cut_result.cached_tokens,
        scale(cut_result.miss_s, head.miss_s, layers, L),
        scale(cut_result.hit_s, head.hit_s, layers, L),
        float(m.flops),
        float(h.flops),
        float(m.seconds),
        float(h.seconds),
        eager,
    )

"""What a replica's step costs: the prefill cost model's terms, applied to a batch.

The calibrated model (``cost/costmodel.py``) is ``T = a + b·max(new, k₁) + c·cached +
e·max(new, k₂)·cached + f·new²`` for one prefill. A step batches several requests' chunks and
decodes (``_kernel.py``): the fixed cost and the linear layers' weight read are paid once per
step, over all its tokens; the attention terms per chunk. Where the warehouse holds no
calibrated model, the roofline (``cost/roofline.py``) is written in the same form:

- ``b·max(n, k₁)``: the linear layers, ``L·max(2P·n / peak, P·w / BW)`` with ``P`` their
  parameters per layer, so ``b = 2PL / peak`` and ``k₁ = w·peak / (2·BW)``;
- ``e·max(n, k₂)·ctx``: attention of ``n`` queries to ``ctx`` keys, compute-bound
  (``4·H·d·L / peak`` per pair) above ``k₂ = K·w·peak / (2·H·BW)`` queries and bound by
  reading the cached K and V below;
- ``f·n²``: attention among the new tokens (``n²/2`` causal pairs);
- ``a``: the LM head, read once per step; ``c = 0`` (the KV read is ``e·k₂·ctx``).

It drops what the roofline counts besides (the new K, V, queries and outputs moved: a few
per cent of a short prefill); ``tests/test_fleet_cost.py`` holds it within 10% of
``prefill_cost`` from 1 to 32,768 new tokens after 0 to 131,072 cached ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.cost.costmodel import CostModel
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import DTYPE_BYTES, ModelShape
from prefixscope.analysis.cost.roofline import linear_params_per_layer
from prefixscope.analysis.cost.shipped import kind_of


@dataclass(frozen=True)
class StepCost:
    """The terms ``a, b, c, e, f`` (seconds) and knees ``k₁, k₂`` (tokens), and where they
    came from: ``calibrated`` (with the replay run that fitted them) or ``roofline``."""

    a: float
    b: float
    c: float
    e: float
    f: float
    k1: float
    k2: float
    source: str
    run_id: str | None = None

    def array(self) -> np.ndarray:
        return np.array([self.a, self.b, self.c, self.e, self.f, self.k1, self.k2], np.float64)

    def prefill_seconds(self, new: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """One prefill alone in a step: the cost model's ``T(new, cached)``."""
        return CostModel((self.a, self.b, self.c, self.e, self.f), (self.k1, self.k2)).seconds(
            new, cached
        )


def from_cost_model(model: CostModel, run_id: str | None = None) -> StepCost:
    """``run_id``: the run that fitted it, or ``shipped:FILE`` for a shipped one."""
    a, b, c, e, f = (float(x) for x in model.coefficients)
    source, run = kind_of(run_id)
    return StepCost(a, b, c, e, f, float(model.knees[0]), float(model.knees[1]), source, run)


def from_roofline(shape: ModelShape, gpu: GpuSpec, dtype: str = "bf16") -> StepCost:
    w = DTYPE_BYTES[dtype]
    layers = shape.num_hidden_layers
    params = linear_params_per_layer(shape)
    heads, kv_heads, d = shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim
    head_params = shape.vocab_size * shape.hidden_size
    pair = 4 * heads * d * layers / gpu.peak_flops
    return StepCost(
        a=max(2.0 * head_params / gpu.peak_flops, head_params * w / gpu.mem_bandwidth),
        b=2.0 * params * layers / gpu.peak_flops,
        c=0.0,
        e=pair,
        f=pair / 2,
        k1=w * gpu.peak_flops / (2 * gpu.mem_bandwidth),
        k2=kv_heads * w * gpu.peak_flops / (2 * heads * gpu.mem_bandwidth),
        source="roofline",
    )

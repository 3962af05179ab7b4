"""What a replica's step costs: the prefill cost model's terms, applied to a batch.

The calibrated model (``cost/costmodel.py``) is ``T = a + b·max(new, k₁) + c·cached +
e·max(new, k₂)·cached + f·new²`` for one prefill. A step batches several requests' chunks and
decodes (``_kernel.py``): the fixed cost and the linear layers' weight read are paid once per
step, over all its tokens; the attention terms per chunk. Where the warehouse holds no
calibrated model, the measured-kernel model is fitted to the form (:func:`from_measured`), and
where its tables do not cover, the roofline (``cost/roofline.py``) is written in it
(:func:`choose` decides, by ``cost/choice.py``'s rule):

- ``b·max(n, k₁)``: the linear layers, ``L·max(2P·n / peak, P·w / BW)`` with ``P`` their
  parameters per layer, so ``b = 2PL / peak`` and ``k₁ = w·peak / (2·BW)``;
- ``e·max(n, k₂)·ctx``: attention of ``n`` queries to ``ctx`` keys, compute-bound
  (``4·H·d·L / peak`` per pair) above ``k₂ = K·w·peak / (2·H·BW)`` queries and bound by
  reading the cached K and V below;
- ``f·n²``: attention among the new tokens (``n²/2`` causal pairs);
- ``a``: the LM head, read once per step; ``c = 0`` (the KV read is ``e·k₂·ctx``).

It drops what the roofline counts besides (the new K, V, queries and outputs moved: a few
per cent of a short prefill); ``tests/test_fleet_cost.py`` holds it within 1% of
``prefill_cost`` for dense models at TP 1, from 1 to 32,768 new tokens after 0 to 131,072
cached ones. Two approximations widen that, bounded in docs/miss_cost.md:

- *Mixture of experts*: the flat part ``b·k₁`` reads every routed expert, what a step of a few
  ``E/k`` tokens or more touches; a smaller step reads fewer (``k`` for one token), so the form
  over-prices it, 18.3× for one token of DeepSeek-V3 (within 10% from 256 tokens up at TP 1).
- *Tensor parallelism*: the all-reduces are linear in the step's tokens, ``g·n``, and the form
  has no plain linear term, so they join ``b`` and the knee is set where the form's two worst
  errors are equal, at ``n → 0`` and at ``n = k₁``: with ``r = g / b`` the all-reduces' share,
  ``k₁ = x·(1 − r)·k₁⁰`` with ``x`` the root of ``r·x² + 2(1 − r)·x − 2 = 0`` (1 at ``r = 0``)
  and ``k₁⁰`` the knee without them; the error is then at most ``x − 1`` (18–27% at TP 8).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.cost import choice
from prefixscope.analysis.cost.costmodel import CostModel
from prefixscope.analysis.cost.deployment import kv_heads_per_gpu
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape
from prefixscope.analysis.cost.roofline import GpuShare
from prefixscope.analysis.cost.shipped import kind_of


@dataclass(frozen=True)
class StepCost:
    """The terms ``a, b, c, e, f`` (seconds) and knees ``k₁, k₂`` (tokens), and where they
    came from: ``calibrated`` (with the replay run that fitted them), ``shipped:FILE``,
    ``measured`` (``cost/measured.py``) or ``roofline``."""

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


def from_roofline(
    shape: ModelShape, gpu: GpuSpec, dtype: str | None = None, tp: int = 1
) -> StepCost:
    """The roofline of one GPU of ``tp`` in the step form (the module docstring)."""
    g = GpuShare.of(shape, gpu, tp, dtype)
    layers, moe_layers = shape.num_hidden_layers, shape.moe_layers
    dense_layers = layers - moe_layers
    active = dense_layers * g.dense_params + moe_layers * g.moe_active
    compute = 2.0 * active / gpu.peak_flops
    # every routed expert read: what a step of more than a few E/k tokens touches
    experts = shape.experts * g.expert_params * g.expert_width
    weights = dense_layers * g.dense_params * g.weight_width
    weights += moe_layers * (g.moe_fixed * g.weight_width + experts)
    link = layers * g.allreduce_s
    b = compute + link
    share = link / b  # the all-reduces' part of the linear term
    knee = 1.0 if share == 0 else (math.sqrt((1 - share) ** 2 + 2 * share) - (1 - share)) / share
    if shape.mla:
        k2 = g.kv_elements * g.act_width * gpu.peak_flops / (g.pair_flops * gpu.mem_bandwidth)
    else:
        kv_heads, heads = kv_heads_per_gpu(shape, tp), shape.num_attention_heads // tp
        k2 = kv_heads * g.act_width * gpu.peak_flops / (2 * heads * gpu.mem_bandwidth)
    pair = g.pair_flops * layers / gpu.peak_flops
    head = g.head_params
    return StepCost(
        a=max(2.0 * head / gpu.peak_flops, head * g.weight_width / gpu.mem_bandwidth),
        b=b,
        c=0.0,
        e=pair,
        f=pair / 2,
        k1=knee * (1 - share) * (weights / active) * gpu.peak_flops / (2 * gpu.mem_bandwidth),
        k2=k2,
        source="roofline",
    )


#: Where the step form is fitted to the measured model: new tokens (1 to a full 32k prompt)
#: after cached ones (none to 128k), as ``roofline`` and the fleet see them.
FIT_NEW = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
FIT_CACHED = (0, 512, 2048, 8192, 32768, 131072)


def from_measured(model) -> tuple[StepCost, float, float]:  # type: ignore[no-untyped-def]
    """The measured-kernel model (``cost/measured.py``) in the step form the fleet prices
    with: ``T(new, cached)`` fitted over :data:`FIT_NEW` × :data:`FIT_CACHED` by the same
    non-negative fit as a calibration (``costmodel.fit``), with the form's median and p90
    relative error against the measured model on those points (%)."""
    from prefixscope.analysis.cost.costmodel import abs_pct_errors, fit

    new, cached = np.meshgrid(np.array(FIT_NEW, np.float64), np.array(FIT_CACHED, np.float64))
    new, cached = new.ravel(), cached.ravel()
    seconds = np.asarray(model.prefill_seconds(new, cached), np.float64)
    fitted = fit(new, cached, seconds)
    err = abs_pct_errors(fitted.seconds(new, cached), seconds)
    a, b, c, e, f = (float(x) for x in fitted.coefficients)
    k1, k2 = (float(k) for k in fitted.knees)
    cost = StepCost(a, b, c, e, f, k1, k2, source="measured")
    return cost, float(np.median(err)), float(np.percentile(err, 90))


def choose(
    shape: ModelShape,
    gpu: GpuSpec | None,
    tp: int = 1,
    fitted: choice.Fitted | None = None,
    kind: str = "auto",
    dtype: str | None = None,
) -> StepCost:
    """The step cost of ``shape`` on one GPU of ``tp`` under ``--cost-model kind``
    (``cost/choice.py``'s rule): ``fitted`` where it is chosen, else the measured model's
    form (:func:`measured_step`), else the roofline's. ``gpu`` None: the CPU."""
    which = choice.chosen(kind, shape, gpu, tp, fitted, dtype)
    if which == "calibrated" and fitted is not None:
        run_id, coefficients, knees = fitted
        return from_cost_model(CostModel(coefficients, knees), run_id)
    assert gpu is not None  # chosen: only a calibration prices the CPU
    if which == "measured":
        return measured_step(shape, gpu, tp, dtype)[0]
    return from_roofline(shape, gpu, dtype, tp)


@functools.lru_cache(maxsize=64)
def measured_step(
    shape: ModelShape, gpu: GpuSpec, tp: int = 1, dtype: str | None = None
) -> tuple[StepCost, float, float]:
    """:func:`from_measured` of the measured model, once per process for each model, GPU, TP
    and dtype (a fit takes a tenth of a second; a plan prices each deployment many times)."""
    return from_measured(choice.measured_for(shape, gpu, tp, dtype))

"""A step's time from measured kernels: what vLLM's own layers take on a GPU, summed.

One GPU of a ``GPUxTP`` replica runs a step of ``m`` tokens (``decodes`` single-token decodes
and prefill chunks of ``new`` tokens after ``cached`` ones) as, per layer:

- **linear layers**: the measured GEMM of ``m`` rows for each projection at the model's own
  ``n`` and ``k`` on that GPU (q/k/v fused, o, gate/up fused, down; ``/ TP`` where vLLM shards
  them), at the weights' dtype, bf16 or fp8 (``kernels.Kernels.gemm``, :func:`gemm_dtype`);
- **attention**: a chunk with no prefix at the measured prefill of its length; decodes at the
  measured decode kernel of their batch and mean context. *A chunk after a cached prefix* has no
  table: it is priced at the measured prefill of its whole length ``new + cached`` times its
  share of that prefill's (query, key) pairs, ``pairs(new, cached) / pairs(new + cached, 0)``,
  and never below the measured decode kernel reading the same keys. The bound: the first form
  runs the chunk at the efficiency of the longer prefill (its rows are as long, its queries
  fewer), so it can only under-price a chunk whose queries are too few to fill the GPU, and
  there the floor (one decode over all the keys) takes over; docs/miss_cost.md gives both
  at the catalog's shapes;
- **multi-head latent attention** (DeepSeek-V3): the measured attention module of its heads
  per GPU, for prefills and decodes alike (the tables time the whole module);
- **mixture of experts**: the measured fused-MoE layer of ``m`` tokens at the experts' dtype
  and TP (vLLM shards experts over TP unless expert parallelism is asked for), the router and
  shared experts as GEMMs;
- **all-reduces** (TP > 1): two of ``m × hidden`` bf16 values per layer, measured (vLLM's
  custom all-reduce);

and once per step the LM head over the sequences that sample (a GEMM, bf16) and a **fixed cost**
``α + β·layers`` (norms, rotary embeddings, activations, sampling, scheduling, launch gaps), plus
``γ·layers`` for a model that normalises q and k in every layer (Qwen3, MiniMax-M2: two more
norms a layer, and under TP MiniMax's all-reduce their statistics across the GPUs),
fitted on real serving runs by ``benchmarks/measured_error.py``, which reports the model's error
against them (docs/miss_cost.md).

A model, GPU, TP and dtype the tables do not cover is not priced: :func:`covers` says why, and
callers fall back to a calibrated model or the roofline, saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

from prefixscope.analysis.cost import kernels
from prefixscope.analysis.cost.deployment import check_tp, kv_heads_per_gpu
from prefixscope.analysis.cost.models import ModelShape

#: The fitted fixed cost per step: ``alpha_ms + beta_ms × layers``, per GPU (ms); written by
#: ``benchmarks/measured_error.py --write``, with the runs it was fitted on.
FIXED_FILE = "fixed.json"


def attention_pairs(new, cached):
    return new * cached + new * (new + 1) / 2


def gemm_dtype(shape: ModelShape, dtype: str | None) -> str:
    """The GEMM table for a model's weights: bf16, or fp8 for fp8 weights. Published fp8
    checkpoints (DeepSeek-V3, Qwen3-FP8, MiniMax) scale per 128 × 128 block, but the tables'
    block-scaled GEMMs carry a flat 0.06 ms (H200) to 0.17 ms (B200) per call at every ``m``
    (activation quantisation and dispatch, timed outside CUDA graphs), several times what the
    served decode steps of those models allow; they are priced at the per-tensor fp8 table,
    the same tensor-core rate (docs/miss_cost.md)."""
    chosen = dtype or shape.weight_dtype
    return "fp8" if chosen in ("fp8", "fp8_block") else chosen


def expert_dtype(shape: ModelShape, dtype: str | None) -> str:
    published = shape.expert_dtype or shape.weight_dtype
    chosen = dtype or published
    if chosen == "fp8":
        return "fp8_block"
    return chosen


@dataclass(frozen=True)
class Fixed:
    """A step's cost outside the measured kernels, ms per GPU: ``alpha_ms`` once, ``beta_ms``
    per layer, and ``qk_norm_ms`` more per layer of a model that normalises q and k there."""

    alpha_ms: float
    beta_ms: float
    qk_norm_ms: float = 0.0

    def ms(self, shape: ModelShape) -> float:
        per_layer = self.beta_ms + (self.qk_norm_ms if shape.qk_norm else 0.0)
        return self.alpha_ms + per_layer * shape.num_hidden_layers


def fixed_costs() -> dict:
    path = resources.files("prefixscope") / "data" / kernels.FOLDER / FIXED_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def error_pct() -> dict:
    """The model's error against real serving runs, % (``benchmarks/measured_error.py``):
    ``ttft_median``, ``ttft_p90``, ``tpot_median``, ``tpot_p90``."""
    return dict(fixed_costs().get("error_pct", {}))


def fixed_for(gpu: str) -> Fixed:
    data = fixed_costs()
    entry = data.get("gpus", {}).get(gpu) or data.get("default") or {"alpha_ms": 0, "beta_ms": 0}
    return Fixed(
        float(entry["alpha_ms"]), float(entry["beta_ms"]), float(entry.get("qk_norm_ms", 0.0))
    )


@dataclass(frozen=True)
class MeasuredModel:
    """Step times of ``shape`` on one GPU of ``tp`` from the GPU's measured tables."""

    shape: ModelShape
    tables: kernels.Kernels
    tp: int
    gemm: str
    experts: str
    fixed: Fixed

    # -- pieces ----------------------------------------------------------------------------
    def _per_gpu_heads(self) -> tuple[int, int, int]:
        s = self.shape
        return s.num_attention_heads // self.tp, kv_heads_per_gpu(s, self.tp), s.head_dim

    def linear_ms(self, m) -> np.ndarray:
        """Every layer's projections and MLPs (and experts) for ``m`` tokens, with the
        all-reduces; attention excluded."""
        s, tp, k = self.shape, self.tp, self.tables
        m = np.asarray(m, np.float64)
        h = s.hidden_size
        total = np.zeros_like(m)
        if not s.mla:
            heads, kv, d = self._per_gpu_heads()
            attn = k.gemm(m, (heads + 2 * kv) * d, h, self.gemm) + k.gemm(
                m, h, heads * d, self.gemm
            )
        else:
            attn = 0.0  # inside the measured MLA module
        dense_mlp = k.gemm(m, 2 * s.intermediate_size // tp, h, self.gemm) + k.gemm(
            m, h, s.intermediate_size // tp, self.gemm
        )
        dense_layers = s.num_hidden_layers - s.moe_layers
        total = total + dense_layers * (attn + dense_mlp)
        if s.moe_layers:
            routed = k.moe(
                m, h, s.moe_intermediate_size, s.experts_per_token, s.experts, tp, self.experts
            )
            shared = 0.0
            if s.shared_experts:
                width = s.shared_experts * s.moe_intermediate_size
                shared = k.gemm(m, 2 * width // tp, h, self.gemm) + k.gemm(
                    m, h, width // tp, self.gemm
                )
            router = k.gemm(m, s.experts, h, "bf16")
            total = total + s.moe_layers * (attn + routed + shared + router)
        if tp > 1:
            total = total + s.num_hidden_layers * 2 * k.allreduce(m * h, tp)
        return total

    def prefill_attention_ms(self, new, cached) -> np.ndarray:
        """One sequence's chunk of ``new`` tokens after ``cached`` ones, every layer (the
        module docstring's rule for a chunk after a prefix)."""
        new = np.maximum(np.asarray(new, np.float64), 1)
        cached = np.asarray(cached, np.float64)
        whole = new + cached
        share = attention_pairs(new, cached) / attention_pairs(whole, 0)
        s = self.shape
        if s.mla:
            heads = s.num_attention_heads // self.tp
            full = self.tables.mla("ctx", heads, 1, whole) * share
            floor = self.tables.mla("gen", heads, 1, whole)
            return s.num_hidden_layers * np.maximum(full, floor)
        heads, kv, d = self._per_gpu_heads()
        full = self.tables.context(heads, kv, d, 1, whole) * share
        floor = self.tables.generation(heads, kv, d, 1, whole)
        per_layer = np.maximum(full, floor)
        sliding = s.sliding_layers if s.sliding_window else 0
        if sliding:
            window = float(s.sliding_window)
            keys = np.minimum(whole, window)
            local = np.maximum(
                self.tables.context(heads, kv, d, 1, np.minimum(new, window))
                * np.maximum(new / np.minimum(new, window), 1.0),
                self.tables.generation(heads, kv, d, 1, keys),
            )
            return (s.num_hidden_layers - sliding) * per_layer + sliding * local
        return s.num_hidden_layers * per_layer

    def decode_attention_ms(self, batch, keys) -> np.ndarray:
        """``batch`` decodes of mean context ``keys``, every layer."""
        s = self.shape
        batch = np.asarray(batch, np.float64)
        if s.mla:
            t = self.tables.mla("gen", s.num_attention_heads // self.tp, batch, keys)
            return np.where(batch > 0, s.num_hidden_layers * t, 0.0)
        heads, kv, d = self._per_gpu_heads()
        t = self.tables.generation(heads, kv, d, np.maximum(batch, 1), keys)
        sliding = s.sliding_layers if s.sliding_window else 0
        total = (s.num_hidden_layers - sliding) * t
        if sliding:
            near = np.minimum(np.asarray(keys, np.float64), float(s.sliding_window))
            total = total + sliding * self.tables.generation(
                heads, kv, d, np.maximum(batch, 1), near
            )
        return np.where(batch > 0, total, 0.0)

    def head_ms(self, sequences) -> np.ndarray:
        s = self.shape
        return self.tables.gemm(
            np.maximum(sequences, 1), s.vocab_size // self.tp, s.hidden_size, "bf16"
        )

    # -- steps -----------------------------------------------------------------------------
    def step_seconds(
        self, decodes: float, decode_keys: float, chunks: list[tuple[float, float]]
    ) -> float:
        """A step of ``decodes`` decode tokens (mean context ``decode_keys``) and prefill
        ``chunks`` (``(new, cached)`` each)."""
        m = decodes + sum(n for n, _ in chunks)
        ms = float(self.linear_ms(m)) + self.fixed.ms(self.shape)
        if decodes:
            ms += float(self.decode_attention_ms(decodes, decode_keys))
        if chunks:
            kinds, counts = np.unique(np.array(chunks, np.float64), axis=0, return_counts=True)
            ms += float(counts @ self.prefill_attention_ms(kinds[:, 0], kinds[:, 1]))
        ms += float(self.head_ms(decodes + len(chunks)))
        return ms / 1e3

    def prefill_seconds(self, new, cached) -> np.ndarray:
        """One prefill alone in a step (``T(new, cached)``, vectorised): what ``roofline``
        prints and the fleet's step form is fitted to."""
        new = np.asarray(new, np.float64)
        ms = (
            self.linear_ms(new)
            + self.prefill_attention_ms(new, cached)
            + self.head_ms(1.0)
            + self.fixed.ms(self.shape)
        )
        return ms / 1e3


def covers(shape: ModelShape, gpu: str, tp: int = 1, dtype: str | None = None) -> str | None:
    """None when the measured tables price this model, GPU, TP and dtype; else why not."""
    tables = kernels.load(gpu)
    if tables is None:
        return f"no measured kernels for GPU {gpu!r} (measured: {', '.join(kernels.gpus())})"
    try:
        check_tp(shape, tp)
    except ValueError as exc:
        return str(exc)
    g = gemm_dtype(shape, dtype)
    if g not in tables.gemm_dtypes():
        return f"no {g} GEMMs measured on {gpu}"
    if shape.mla:
        if not tables.has("mla_ctx_ms"):
            return f"no multi-head latent attention measured on {gpu}"
    else:
        d = shape.head_dim
        for prefix in ("ctx", "gen"):
            if not (tables.arrays[f"{prefix}_heads"][:, 2] == d).any():
                return f"no attention measured at head dim {d} on {gpu}"
    if shape.moe_layers:
        e = expert_dtype(shape, dtype)
        if tables.moe(1, shape.hidden_size, shape.moe_intermediate_size, shape.experts_per_token,
                      shape.experts, tp, e) is None:  # fmt: skip
            return (
                f"no fused-MoE layer measured on {gpu} for {shape.name}'s experts "
                f"({shape.experts} × {shape.moe_intermediate_size}, top {shape.experts_per_token}, "
                f"{e}, TP {tp})"
            )
    if tp > 1 and not tables.has("ar_ms"):
        return f"no all-reduce measured on {gpu}"
    return None


def measured_model(
    shape: ModelShape, gpu: str, tp: int = 1, dtype: str | None = None
) -> MeasuredModel:
    """ValueError, in one line, where :func:`covers` says the tables do not price it."""
    why = covers(shape, gpu, tp, dtype)
    if why is not None:
        raise ValueError(why)
    tables = kernels.load(gpu)
    assert tables is not None
    return MeasuredModel(
        shape, tables, tp, gemm_dtype(shape, dtype), expert_dtype(shape, dtype), fixed_for(gpu)
    )


def tabulated(model: MeasuredModel, max_new: float, max_cached: float, points: int = 384):
    """``model.prefill_seconds`` as a table over ``points`` log-spaced new tokens (1 to
    ``max_new``) and as many cached ones (0 to ``max_cached``, log1p-spaced), read bilinearly in
    log time: what prices millions of requests (``savings``, the planner's next GiB) in a few
    array passes instead of a pass of every kernel table over every request. Its error against
    the model itself: 0.0015% at the median, under 0.5% at worst (at a kernel table's knee),
    ``tests/test_measured_model.py``."""
    new_axis = np.geomspace(1.0, max(float(max_new), 2.0), points)
    cached_axis = np.expm1(np.linspace(0.0, np.log1p(max(float(max_cached), 1.0)), points))
    # the ends exactly the largest request's (exp and log round): none falls past them
    new_axis[-1], cached_axis[-1] = max(float(max_new), 2.0), max(float(max_cached), 1.0)
    n_grid, c_grid = np.meshgrid(new_axis, cached_axis, indexing="ij")
    table = np.log(model.prefill_seconds(n_grid.ravel(), c_grid.ravel())).reshape(n_grid.shape)
    x_axis, y_axis = np.log(new_axis), np.log1p(cached_axis)

    def seconds(new, cached) -> np.ndarray:
        x = np.log(np.maximum(np.asarray(new, np.float64), 1.0))
        y = np.log1p(np.maximum(np.asarray(cached, np.float64), 0.0))
        x, y = np.clip(x, x_axis[0], x_axis[-1]), np.clip(y, y_axis[0], y_axis[-1])
        i = np.clip(np.searchsorted(x_axis, x) - 1, 0, points - 2)
        j = np.clip(np.searchsorted(y_axis, y) - 1, 0, points - 2)
        u = (x - x_axis[i]) / (x_axis[i + 1] - x_axis[i])
        v = (y - y_axis[j]) / (y_axis[j + 1] - y_axis[j])
        low = table[i, j] * (1 - u) + table[i + 1, j] * u
        high = table[i, j + 1] * (1 - u) + table[i + 1, j + 1] * u
        out = np.exp(low * (1 - v) + high * v)
        # past the table's edge (longer than any request it was built for): the model itself,
        # on those requests alone
        new_a, cached_a = np.broadcast_arrays(
            np.asarray(new, np.float64), np.asarray(cached, np.float64)
        )
        beyond = (new_a > new_axis[-1]) | (cached_a > cached_axis[-1])
        if beyond.any():
            out = np.array(out, np.float64, copy=True)
            out[beyond] = model.prefill_seconds(new_a[beyond], cached_a[beyond])
        return out

    return seconds


#: Requests above which :func:`many` prices by the table rather than the model itself.
TABULATE_ABOVE = 100_000


def many(model: MeasuredModel):
    """``model.prefill_seconds`` for arrays of any length: the model itself for a few
    requests, :func:`tabulated` over the arrays' own range for many."""

    def seconds(new, cached) -> np.ndarray:
        new, cached = np.asarray(new, np.float64), np.asarray(cached, np.float64)
        if new.size <= TABULATE_ABOVE:
            return model.prefill_seconds(new, cached)
        table = tabulated(model, float(new.max()), float(cached.max()))
        return table(new, cached)

    return seconds

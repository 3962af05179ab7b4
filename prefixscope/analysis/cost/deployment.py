"""A deployment's memory: what one replica's HBM holds, per GPU, under tensor parallelism.

A replica is ``GPU[xTP]`` (``h100``, ``h100x1``, ``h200x8``): TP GPUs of one kind holding one
copy of the model between them. Per GPU, as vLLM sizes its KV pool
(``vllm/v1/worker/gpu_worker.py`` ``Worker.determine_available_memory``, commit 0012cf69:
``total memory × gpu_memory_utilization − peak memory`` of a profiling step):

    budget   = HBM × gpu_memory_utilization                  (0.9, vLLM's default)
    weights  = all the weights / TP                          (every expert, at its dtype)
    reserve  = step tokens × (2·I_step / TP + 4·h) × 2 bytes + OVERHEAD_GIB
    KV pool  = budget − weights − reserve

The reserve stands for the profiling step's peak activations: a step of ``budget_tokens``
tokens (``max_num_batched_tokens``, 8,192) holds the SwiGLU's gate and up outputs (``2·I``,
sharded over TP; for a mixture of experts the ``k`` routed and the shared experts' widths) and
a few hidden-size buffers (residual, norm output, attention output, MLP output: ``4·h``), in
bf16; ``OVERHEAD_GIB`` is what the profile adds beside tensors (CUDA context, NCCL buffers,
CUDA graphs): an assumption, set from the 0.35 GiB of non-torch memory one public vLLM log
shows (docs/fleet.md) with room for graphs.

Each GPU stores every token's KV for its share of the KV heads (``vllm/config/model.py``
``ModelConfig.get_num_kv_heads``): with grouped-query attention ``max(1, K / TP)`` heads, so
the heads are replicated once TP exceeds K; with multi-head latent attention the latent
(``kv_lora_rank + qk_rope_head_dim``) is stored whole on every GPU. TP adds KV capacity to a
GQA model (more GPUs, fewer heads each) but not to an MLA one (more GPUs, the same latent).

Refused, each in one line: a TP that does not divide the query heads (vLLM shards them
evenly), a GQA TP that neither divides nor is divided by the KV heads (vLLM's
``QKVParallelLinear`` shards or replicates them whole), and weights that leave no room for
one block of KV (naming the smallest TP that fits). TP need not be a power of two: vLLM asks
only for the divisions above, and a 48-head model runs at TP 3 or 6.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prefixscope.analysis.cost.gpus import ALIASES, GPUS, GpuSpec, resolve_gpu
from prefixscope.analysis.cost.models import GIB, ModelShape
from prefixscope.analysis.cost.params import weight_bytes

#: vLLM's defaults: ``gpu_memory_utilization`` (vllm/config/cache.py) and the chunked-prefill
#: step budget ``max_num_batched_tokens`` this project's fleet model also uses.
GPU_MEMORY_UTILIZATION = 0.9
BUDGET_TOKENS = 8192
#: Memory a serving process holds beside its tensors, GiB per GPU (an assumption: see above).
OVERHEAD_GIB = 1.0
#: The most GPUs one replica may span: beyond any tensor-parallel group deployed (TP 8 in a
#: node, 16 or 32 across two to four).
MAX_TP = 1024
#: A catalog name, or a TOML file's path (``my-gpu.tomlx4``), then ``x`` and the TP.
_DEPLOYMENT = re.compile(r"(?P<gpu>.+?\.toml|[a-z0-9][a-z0-9._-]*?)(?:x(?P<tp>[0-9]+))?")
FORM = "give GPU or GPUxTP, e.g. h100x1 or h200x8"


@dataclass(frozen=True)
class Deployment:
    """A replica's kind of GPU and how many of them hold the model."""

    gpu: GpuSpec
    tp: int

    @property
    def name(self) -> str:
        """``GPUxTP``, which ``parse_deployment`` reads back (``mi300x8``, through its alias)."""
        stem = self.gpu.name[:-1] if ALIASES.get(self.gpu.name[:-1]) == self.gpu.name else None
        return f"{stem or self.gpu.name}x{self.tp}"


@dataclass(frozen=True)
class MemorySplit:
    """What each GPU of a replica holds, in GiB; the pool also in tokens and blocks."""

    deployment: str
    model: str
    gpus: int
    hbm_gib: float
    budget_gib: float  # hbm × gpu_memory_utilization
    weights_gib: float  # per GPU
    reserve_gib: float  # activations of one step, and the process's overhead
    kv_pool_gib: float  # per GPU
    kv_bytes_per_token: int  # per GPU: its share of the KV heads, or the whole latent
    kv_heads_per_gpu: int  # 0 for multi-head latent attention
    block_size: int

    @property
    def kv_pool_tokens(self) -> int:
        """Tokens of KV the replica holds: each GPU holds its share of every token's KV.
        ``memory_split`` returns a split only when this is at least one block (GiB are bytes
        / 2**30, exact in floating point, so these are the bytes it checked)."""
        return int(self.kv_pool_gib * GIB // self.kv_bytes_per_token)

    @property
    def kv_pool_blocks(self) -> int:
        return self.kv_pool_tokens // self.block_size


def parse_deployment(text: str | Deployment) -> Deployment:
    """``GPU`` (one GPU) or ``GPUxTP``: a GPU ``resolve_gpu`` knows, TP from 1 to ``MAX_TP``;
    one parsed already (where a command line parsed it) as it is."""
    if isinstance(text, Deployment):
        return text
    key = text.strip()
    m = _DEPLOYMENT.fullmatch(key if ".toml" in key.lower() else key.lower())
    if m is None:
        raise ValueError(f"a deployment is GPU or GPUxTP, got {text!r} — {FORM}")
    gpu_name, tp_text = m.group("gpu"), m.group("tp")
    tp = int(tp_text) if tp_text is not None else 1
    if not 1 <= tp <= MAX_TP:
        raise ValueError(f"a deployment's TP must be from 1 to {MAX_TP:,}, got {tp_text} — {FORM}")
    if not (gpu_name in GPUS or gpu_name in ALIASES or gpu_name.lower().endswith(".toml")):
        # exact names only: resolve_gpu's match on a contained name (for torch's device
        # names) would read h100x as h100
        raise ValueError(
            f"{text!r}: unknown GPU {gpu_name!r}; known: {', '.join(GPUS)} (or a .toml file) "
            f"— {FORM}"
        )
    try:
        gpu = resolve_gpu(gpu_name)
    except ValueError as exc:
        what = " ".join(str(exc).split()).split(" — ")[0]
        raise ValueError(f"{text!r}: {what} — {FORM}") from None
    return Deployment(gpu, tp)


def kv_heads_per_gpu(shape: ModelShape, tp: int) -> int:
    """KV heads each GPU stores: ``max(1, K / TP)``; 0 for a latent (stored whole)."""
    return 0 if shape.mla else max(1, shape.num_key_value_heads // tp)


def check_tp(shape: ModelShape, tp: int) -> None:
    """ValueError unless ``tp`` shards ``shape``'s heads as vLLM does."""
    heads, kv = shape.num_attention_heads, shape.num_key_value_heads
    if heads % tp:
        raise ValueError(
            f"TP {tp} does not divide {shape.name}'s {heads} attention heads — give a TP that "
            f"does ({', '.join(str(t) for t in valid_tps(shape)[:8])}, …)"
        )
    if not shape.mla and kv % tp and tp % kv:
        raise ValueError(
            f"TP {tp} neither divides nor is a multiple of {shape.name}'s {kv} KV heads — give "
            f"a TP that is ({', '.join(str(t) for t in valid_tps(shape)[:8])}, …)"
        )


def valid_tps(shape: ModelShape) -> list[int]:
    """Every TP ``check_tp`` takes, smallest first."""
    heads, kv = shape.num_attention_heads, shape.num_key_value_heads
    return [
        t
        for t in range(1, min(heads, MAX_TP) + 1)
        if not heads % t and (shape.mla or not kv % t or not t % kv)
    ]


def reserve_bytes(shape: ModelShape, tp: int, budget_tokens: int = BUDGET_TOKENS) -> float:
    """Peak activations of a step of ``budget_tokens`` tokens on one GPU, and the overhead."""
    dense = shape.intermediate_size if (not shape.moe or shape.dense_layers) else 0
    experts = (shape.experts_per_token + shape.shared_experts) * shape.moe_intermediate_size
    width = 2 * max(dense, experts) / tp + 4 * shape.hidden_size
    return budget_tokens * width * 2 + OVERHEAD_GIB * GIB


def memory_split(
    shape: ModelShape,
    deployment: Deployment,
    *,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    budget_tokens: int = BUDGET_TOKENS,
    block_size: int = 16,
    weight_dtype: str | None = None,
    kv_dtype: str = "bf16",
) -> MemorySplit:
    """The per-GPU split of ``deployment`` serving ``shape`` (the module docstring's rule);
    ValueError, in one line, when the TP or the weights do not fit."""
    gpu, tp = deployment.gpu, deployment.tp
    if gpu.hbm_gib is None:
        raise ValueError(
            f"GPU {gpu.name!r} has no HBM capacity — give it in a TOML file (hbm_gib = …)"
        )
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be above 0 and at most 1, got {gpu_memory_utilization}"
            " — give a fraction such as 0.9"
        )
    check_tp(shape, tp)
    heads = kv_heads_per_gpu(shape, tp)
    per_token = shape.num_hidden_layers * shape.kv_bytes_per_token_layer(kv_dtype, heads or None)
    split = _split(shape, gpu, tp, gpu_memory_utilization, budget_tokens, weight_dtype)
    budget, weights, reserve = split
    pool = budget - weights - reserve
    if pool < per_token * block_size:
        fits = smallest_fitting_tp(
            shape, gpu, gpu_memory_utilization, budget_tokens, weight_dtype, kv_dtype, block_size
        )
        fix = (
            f"use {gpu.name}x{fits} or more GPUs per replica"
            if fits
            else f"no TP of {gpu.name} fits it; use a larger GPU or a smaller weight dtype"
        )
        raise ValueError(
            f"{shape.name} does not fit on {deployment.name}: {weights / GIB:.1f} GiB of weights "
            f"and {reserve / GIB:.1f} GiB of reserve per GPU against a budget of "
            f"{budget / GIB:.1f} GiB — {fix}"
        )
    return MemorySplit(
        deployment=deployment.name,
        model=shape.name,
        gpus=tp,
        hbm_gib=float(gpu.hbm_gib),
        budget_gib=budget / GIB,
        weights_gib=weights / GIB,
        reserve_gib=reserve / GIB,
        kv_pool_gib=pool / GIB,
        kv_bytes_per_token=per_token,
        kv_heads_per_gpu=heads,
        block_size=block_size,
    )


def _split(
    shape: ModelShape,
    gpu: GpuSpec,
    tp: int,
    utilization: float,
    budget_tokens: int,
    weight_dtype: str | None,
) -> tuple[float, float, float]:
    """Budget, weights and reserve per GPU, in bytes."""
    budget = float(gpu.hbm_gib or 0) * GIB * utilization
    return budget, weight_bytes(shape, weight_dtype) / tp, reserve_bytes(shape, tp, budget_tokens)


def smallest_fitting_tp(
    shape: ModelShape,
    gpu: GpuSpec,
    utilization: float = GPU_MEMORY_UTILIZATION,
    budget_tokens: int = BUDGET_TOKENS,
    weight_dtype: str | None = None,
    kv_dtype: str = "bf16",
    block_size: int = 16,
) -> int | None:
    """The smallest TP ``check_tp`` takes whose pool holds at least one block; None if none."""
    for tp in valid_tps(shape):
        heads = kv_heads_per_gpu(shape, tp)
        block = shape.num_hidden_layers * shape.kv_bytes_per_token_layer(kv_dtype, heads or None)
        budget, weights, reserve = _split(shape, gpu, tp, utilization, budget_tokens, weight_dtype)
        if budget - weights - reserve >= block * block_size:
            return tp
    return None


def fitting(
    gpu: GpuSpec | None, shape: ModelShape, weight_dtype: str | None = None
) -> Deployment | None:
    """The deployment of ``gpu`` (resolved; None: the CPU) that holds ``shape`` on the fewest
    GPUs: what a command prices when it is given a GPU and no deployment. None for the CPU or
    a GPU without an HBM figure (nothing to size by); ValueError, in one line, when no TP of
    it holds the model."""
    if gpu is None or gpu.hbm_gib is None:
        return None
    tp = smallest_fitting_tp(shape, gpu, weight_dtype=weight_dtype)
    if tp is None:
        raise ValueError(
            f"no TP of {gpu.name} holds {shape.name}'s weights — give a larger GPU, or a smaller "
            "weight dtype"
        )
    return Deployment(gpu, tp)


def format_splits(splits: list[MemorySplit]) -> str:
    """The splits as a table, one deployment a row (what ``prefixscope deployment`` prints)."""
    head = (
        "deployment  model              GPUs  HBM GiB  budget  weights  reserve  KV pool"
        "  KV B/token  KV tokens    blocks"
    )
    rows = [head]
    for s in splits:
        rows.append(
            f"{s.deployment:<11} {s.model:<18} {s.gpus:>4} {s.hbm_gib:>8.1f} {s.budget_gib:>7.1f}"
            f" {s.weights_gib:>8.2f} {s.reserve_gib:>8.2f} {s.kv_pool_gib:>8.2f}"
            f" {s.kv_bytes_per_token:>11,} {s.kv_pool_tokens:>10,} {s.kv_pool_blocks:>9,}"
        )
    if splits:
        rows.append(
            f"(GiB and bytes per GPU; KV tokens and blocks of {splits[0].block_size} tokens "
            "per replica)"
        )
    return "\n".join(rows)

"""What a fleet row says about the hardware its replicas stand for: the deployment (``GPUxTP``,
``cost/deployment.py``), its memory split per GPU and its KV pool in the trace's blocks, and
whether the row's capacity fits in that pool (``exceeds_hbm``).

A row with a deployment is judged against that deployment's pool. A row without one (a bare
``--capacity-blocks`` / ``--capacity-gib``) has NULL deployment columns and is judged against
one GPU of the kind that priced its steps (``--gpu``x1) serving its model; ``exceeds_hbm`` is
NULL where that GPU has no HBM figure (a ``NAME:TFLOPS:TBPS`` spec, or a CPU calibration), and
true for every capacity where the model's weights leave one GPU no room for a block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefixscope.analysis.cost.deployment import Deployment, memory_split, parse_deployment
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import ModelShape
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.run import Fleet

#: The deployment columns of ``fleet_hit_rates`` and ``fleet_replicas``, in schema order.
COLUMNS = (
    "deployment",
    "gpus",
    "kv_pool_blocks",
    "weights_gib",
    "reserve_gib",
    "kv_pool_gib",
    "exceeds_hbm",
)


@dataclass(frozen=True)
class Hardware:
    """A replica's deployment (every field None: none given) and the pool, in blocks per
    replica, that a capacity is judged against (None: no HBM figure to judge by)."""

    deployment: str | None = None
    gpus: int | None = None  # per replica
    kv_pool_blocks: int | None = None  # per replica, in the trace's blocks
    weights_gib: float | None = None  # per GPU
    reserve_gib: float | None = None  # per GPU
    kv_pool_gib: float | None = None  # per GPU
    gpu: GpuSpec | None = None  # the deployment's GPU, resolved once (it prices steps)
    judged_blocks: int | None = None

    def priced_by(self, gpu: GpuSpec | None) -> tuple[GpuSpec | None, int]:
        """(GPU, TP) whose step cost prices this replica: its deployment's, else one ``gpu``
        (None: the CPU, which only a calibration prices)."""
        return (self.gpu if self.deployment else gpu), self.gpus or 1

    def exceeds(self, capacity_blocks: int) -> bool | None:
        """Whether ``capacity_blocks`` per replica is more than the HBM holds."""
        return None if self.judged_blocks is None else capacity_blocks > self.judged_blocks

    def columns(self, capacity_blocks: int) -> dict:
        """The row's deployment columns (``COLUMNS``) at ``capacity_blocks``."""
        return {
            "deployment": self.deployment,
            "gpus": self.gpus,
            "kv_pool_blocks": self.kv_pool_blocks,
            "weights_gib": self.weights_gib,
            "reserve_gib": self.reserve_gib,
            "kv_pool_gib": self.kv_pool_gib,
            "exceeds_hbm": self.exceeds(capacity_blocks),
        }


def of_deployment(
    text: str | Deployment, shape: ModelShape, block_size: int, kv_dtype: str
) -> Hardware:
    """``text`` (``GPU[xTP]``, or one parsed already) serving ``shape``, its pool in blocks of
    ``block_size``;
    ValueError in one line (``WHAT — WHAT TO DO``) when it is unknown, its TP does not shard
    the model, or the model does not fit, or its pool holds no whole block (``memory_split``'s
    one check: a split it returns holds at least one block of ``block_size``)."""
    deployment = parse_deployment(text)
    split = memory_split(shape, deployment, block_size=block_size, kv_dtype=kv_dtype)
    return Hardware(
        deployment=deployment.name,
        gpus=split.gpus,
        kv_pool_blocks=split.kv_pool_blocks,
        weights_gib=split.weights_gib,
        reserve_gib=split.reserve_gib,
        kv_pool_gib=split.kv_pool_gib,
        gpu=deployment.gpu,
        judged_blocks=split.kv_pool_blocks,
    )


def judged_by_gpu(
    spec: GpuSpec | None, shape: ModelShape, block_size: int, kv_dtype: str
) -> Hardware:
    """No deployment: the pool of one GPU (``spec``, resolved; None: the CPU) serving
    ``shape`` judges the capacity (the module docstring's rule)."""
    if spec is None or spec.hbm_gib is None:
        return Hardware()
    try:
        split = memory_split(shape, Deployment(spec, 1), block_size=block_size, kv_dtype=kv_dtype)
    except ValueError:  # the weights leave no block: no capacity fits
        return Hardware(judged_blocks=0)
    return Hardware(judged_blocks=split.kv_pool_blocks)


def capacity_options(
    blocks: Sequence[int],
    gibs: Sequence[float | None],
    deployments: Sequence[Deployment],
    shape: ModelShape,
    gpu: GpuSpec | None,
    block_size: int,
    kv_dtype: str,
) -> list[tuple[int, float | None, Hardware]]:
    """Every (capacity in blocks, the GiB it came from, hardware) a grid runs, from the
    capacities given (``blocks``, ``gibs``: none, or one GiB or None per capacity): without
    deployments, each capacity given, judged by one ``gpu``; with them, each deployment at its
    own pool, or at each capacity given (a what-if, ``exceeds_hbm`` where it does not fit)."""
    given = bool(blocks)
    if not deployments:
        if not given:
            raise ValueError(
                "no capacity to simulate — give --deployment GPU[xTP], or --capacity-blocks "
                "or --capacity-gib"
            )
        judged = judged_by_gpu(gpu, shape, block_size, kv_dtype)
        return [(b, g, judged) for b, g in zip(blocks, gibs, strict=True)]
    out: list[tuple[int, float | None, Hardware]] = []
    for deployment in deployments:
        hw = of_deployment(deployment, shape, block_size, kv_dtype)
        pool = [(hw.kv_pool_blocks or 0, None)]
        out += [(b, g, hw) for b, g in (zip(blocks, gibs, strict=True) if given else pool)]
    return out


def check_pools_fit(runs: Sequence[tuple[Fleet, Hardware]]) -> None:
    """A KV pool engine holds its running requests in HBM: its capacity cannot be a what-if
    beyond the deployment's pool (``ideal`` may be, and its rows say ``exceeds_hbm``)."""
    for f, h in runs:
        if resolve_engine(f.engine).pooled and h.deployment and h.exceeds(f.capacity_blocks):
            raise ValueError(
                f"--engine {f.engine} runs the KV pool in HBM: {f.capacity_blocks:,} blocks "
                f"exceed {h.deployment}'s pool of {h.kv_pool_blocks:,}; drop --capacity-blocks "
                "or use --engine ideal for a what-if"
            )

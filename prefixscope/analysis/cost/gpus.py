"""Accelerator specs: peak dense bf16 FLOP/s and memory bandwidth for the roofline, and what a
deployment is sized by: HBM capacity, host DRAM per GPU, host link and NVLink bandwidth, and a
default price per GPU-hour.

Figures are the vendors' datasheet numbers (the SXM / OAM parts, dense: no 2:4 sparsity), each
cited where it is written: what a kernel can at best reach, never what it does. A datasheet's
"80 GB" of HBM is the part's capacity as sold; the driver reports a little less (the engine
sizes its pool from what the driver reports). Host DRAM per GPU is that of the vendor's 8-GPU
reference system (DGX) or a cloud instance, divided by its GPUs: a typical figure, not a rule.
Prices are assumptions (see ``PRICE_NOTE``). Pure Python: the GPU benchmark imports it on a
machine with torch and numpy only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from prefixscope.analysis.cost.gpufile import (  # a custom spec's bounds, either form
    MAX_TBPS,
    MAX_TFLOPS,
    MIN_TBPS,
    MIN_TFLOPS,
    read_gpu_file,
)
from prefixscope.analysis.cost.gpufile import NAME as _NAME

#: A figure as a person types it: a decimal number, ``_`` only between digits (as the
#: command's number flags take them); no nan, inf, hexadecimal or signs.
_FIGURE = re.compile(r"(?:[0-9]+(?:_[0-9]+)*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


#: Where the default prices come from: nowhere but round figures. On-demand rates differ by
#: provider, region and month, so a figure here would be stale the day it was written; give
#: your own (``--prices`` for ``plan``, ``price_hour`` in a GPU's TOML file).
PRICE_NOTE = "assumed round figures, not quotes: override them"


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator. The last five fields are None when unknown (a ``NAME:TFLOPS:TBPS``
    spec): what needs them (a deployment's memory split) refuses such a spec by name."""

    name: str
    peak_flops: float  # dense bf16 FLOP/s
    mem_bandwidth: float  # bytes/s (HBM)
    hbm_gib: float | None = None  # HBM capacity per GPU, as sold
    host_dram_gib: float | None = None  # typical host DRAM per GPU
    host_link_gbps: float | None = None  # GPU <-> host, GB/s one way
    nvlink_gbps: float | None = None  # GPU <-> GPU, GB/s one way per GPU (0: none)
    price_hour: float | None = None  # $ per GPU-hour (PRICE_NOTE)

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound on this part."""
        return self.peak_flops / self.mem_bandwidth


#: One-way bandwidth of a PCIe x16 link: 32 GT/s (5.0) or 16 GT/s (4.0) per lane, 128b/130b
#: encoding (PCI-SIG), the same figures the fleet's DRAM tier defaults to.
PCIE5_X16_GBPS, PCIE4_X16_GBPS = 63.0, 31.5

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # A100 SXM4 80 GB (NVIDIA A100 datasheet): 312 TFLOP/s bf16 dense, 2,039 GB/s HBM2e,
        # 80 GB, NVLink 600 GB/s (both ways: 300 one way), PCIe 4.0. Host DRAM: DGX A100 640 GB,
        # 2 TB over 8 GPUs.
        GpuSpec("a100", 312e12, 2.039e12, 80, 256, PCIE4_X16_GBPS, 300, 1.50),
        # H100 SXM5 (NVIDIA H100 datasheet): 989 TFLOP/s bf16 dense (half the 1,979 quoted
        # with sparsity), 3.35 TB/s, 80 GB HBM3, NVLink 900 GB/s (450 one way), PCIe 5.0.
        # Host DRAM: DGX H100, 2 TB over 8 GPUs.
        GpuSpec("h100", 989e12, 3.35e12, 80, 256, PCIE5_X16_GBPS, 450, 2.50),
        # H200 SXM (NVIDIA H200 datasheet): the H100's compute with 141 GB of HBM3e at
        # 4.8 TB/s, NVLink 900 GB/s, PCIe 5.0. Host DRAM: DGX H200, 2 TB over 8 GPUs.
        GpuSpec("h200", 989e12, 4.8e12, 141, 256, PCIE5_X16_GBPS, 450, 3.50),
        # B200 (NVIDIA DGX B200 datasheet, 8 GPUs: 1,440 GB HBM3e, 64 TB/s, 72 PFLOP/s FP8
        # and 36 PFLOP/s FP16/BF16 with sparsity; per GPU 180 GB, 8 TB/s, 2.25 PFLOP/s bf16
        # dense), NVLink 5 1.8 TB/s (900 one way), PCIe 5.0; 2 TB of system memory.
        GpuSpec("b200", 2250e12, 8.0e12, 180, 256, PCIE5_X16_GBPS, 900, 6.00),
        # L40S (NVIDIA L40S datasheet): 362.05 TFLOP/s bf16 dense (733 with sparsity), 48 GB
        # GDDR6 at 864 GB/s, no NVLink, PCIe 4.0 x16. Host DRAM: AWS g6e.48xlarge, 8 L40S
        # and 1,536 GiB.
        GpuSpec("l40s", 362.05e12, 0.864e12, 48, 192, PCIE4_X16_GBPS, 0, 1.00),
        # MI300X (AMD Instinct MI300X datasheet): 1,307.4 TFLOP/s bf16 dense, 192 GB HBM3 at
        # 5.3 TB/s, Infinity Fabric 896 GB/s peak aggregate (448 one way), PCIe 5.0 x16.
        # Host DRAM: Azure ND MI300X v5, 8 GPUs and 1,850 GiB.
        GpuSpec("mi300x", 1307.4e12, 5.3e12, 192, 231, PCIE5_X16_GBPS, 448, 3.00),
    )
}
#: Other names of the parts above, as their datasheets and clouds call them.
ALIASES: dict[str, str] = {
    "a100-80gb": "a100",
    "a100-sxm4-80gb": "a100",
    "h100-80gb": "h100",
    "h100-sxm": "h100",
    "h200-141gb": "h200",
    "mi300": "mi300x",  # so that eight of them read mi300x8
}


def register_gpu(spec: GpuSpec) -> GpuSpec:
    """Add (or replace) a spec in the table, so ``resolve_gpu`` finds it by name."""
    GPUS[spec.name.lower()] = spec
    return spec


def resolve_gpu(text: str) -> GpuSpec:
    """A spec by name (``h100``, or an alias: ``h100-80gb``), a custom one as
    ``NAME:TFLOPS:TBPS`` (``mygpu:400:1.6``), or one from a TOML file (``my-gpu.toml``).

    Device names as torch reports them (``NVIDIA H200``, ``NVIDIA A100-SXM4-80GB``) match the
    table entry they contain.
    """
    key = text.strip().lower()
    if key.endswith(".toml"):
        return gpu_from_file(text.strip())
    if ":" in key:
        return custom_gpu(text)
    if key in GPUS:
        return GPUS[key]
    if key in ALIASES:
        return GPUS[ALIASES[key]]
    for name, spec in GPUS.items():  # the first entry whose name the text contains
        if name in key.replace("-", " ").split() or name in key:
            return spec
    raise ValueError(
        f"unknown GPU {text!r}; known: {', '.join(GPUS)} (or NAME:TFLOPS:TBPS, or a .toml file)"
    )


def gpu_from_file(path: str) -> GpuSpec:
    """A spec from a TOML file (``gpufile.py``: every key checked there)."""
    v = read_gpu_file(path)
    _own_name(str(v["name"]), f"{path}: the GPU file's name", "fix the GPU file")

    def get(key: str) -> float | None:
        value = v.get(key)
        return None if value is None else float(value)

    return GpuSpec(
        name=str(v["name"]),
        peak_flops=float(v["tflops"]) * 1e12,
        mem_bandwidth=float(v["tbps"]) * 1e12,
        hbm_gib=get("hbm_gib"),
        host_dram_gib=get("host_dram_gib"),
        host_link_gbps=get("host_link_gbps"),
        nvlink_gbps=get("nvlink_gbps"),
        price_hour=get("price_hour"),
    )


def _own_name(name: str, what: str, fix: str) -> None:
    """A custom GPU never takes a name the catalog reads as one of its own: every later
    lookup by that name (a fleet row's GPU, its price, its host link) would find the catalog's
    part, not this one."""
    try:
        known = resolve_gpu(name)
    except ValueError:
        return
    raise ValueError(
        f"{what} {name!r} reads as the catalog's {known.name} — give it a name of its own "
        f"({fix})"
    )


def custom_gpu(text: str) -> GpuSpec:
    """``NAME:TFLOPS:TBPS``, each figure a finite number within the bounds above; ValueError,
    naming the figure and its bounds, otherwise."""
    parts = text.strip().lower().split(":")
    form = "give NAME:TFLOPS:TBPS, e.g. mygpu:400:1.6"
    if len(parts) != 3:
        raise ValueError(f"a GPU spec is NAME:TFLOPS:TBPS, got {text!r} — {form}")
    name, tflops, tbps = parts
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"a GPU spec's name is 1 to 64 letters, digits, '.', '_' or '-', got {name!r} — {form}"
        )
    _own_name(name, "a GPU spec's name", form)
    figures = (
        ("TFLOPS", tflops, MIN_TFLOPS, MAX_TFLOPS),
        ("TBPS", tbps, MIN_TBPS, MAX_TBPS),
    )
    values = []
    for what, word, low, high in figures:
        value = float(word) if _FIGURE.fullmatch(word) else math.nan
        if not low <= value <= high:
            raise ValueError(
                f"a GPU spec's {what} must be a number from {low:g} to {high:,g}, got {word!r} "
                f"in {text!r} — {form}"
            )
        values.append(value)
    return GpuSpec(name, values[0] * 1e12, values[1] * 1e12)

"""Accelerator specs for the roofline: peak dense bf16 FLOP/s and memory bandwidth.

Figures are the vendors' datasheet numbers for the SXM parts, dense (no 2:4 sparsity): what a
kernel can at best reach, never what it does. Pure Python: the GPU benchmark imports it on a
machine with torch and numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float  # dense bf16 FLOP/s
    mem_bandwidth: float  # bytes/s (HBM)

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound on this part."""
        return self.peak_flops / self.mem_bandwidth


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # A100 SXM4 80 GB: 312 TFLOP/s bf16 dense, 2,039 GB/s HBM2e.
        GpuSpec("a100", 312e12, 2.039e12),
        # H100 SXM5: 989 TFLOP/s bf16 dense (half the 1,979 quoted with sparsity), 3.35 TB/s.
        GpuSpec("h100", 989e12, 3.35e12),
        # H200 SXM: the H100's compute with 141 GB of HBM3e at 4.8 TB/s.
        GpuSpec("h200", 989e12, 4.8e12),
    )
}


def register_gpu(spec: GpuSpec) -> GpuSpec:
    """Add (or replace) a spec in the table, so ``resolve_gpu`` finds it by name."""
    GPUS[spec.name.lower()] = spec
    return spec


def resolve_gpu(text: str) -> GpuSpec:
    """A spec by name (``h100``), or a custom one as ``NAME:TFLOPS:TBPS`` (``mygpu:400:1.6``).

    Device names as torch reports them (``NVIDIA H200``, ``NVIDIA A100-SXM4-80GB``) match the
    table entry they contain.
    """
    key = text.strip().lower()
    if key.count(":") == 2:
        name, tflops, tbps = key.split(":")
        try:
            spec = GpuSpec(name, float(tflops) * 1e12, float(tbps) * 1e12)
        except ValueError:
            raise ValueError(f"expected NAME:TFLOPS:TBPS, got {text!r}") from None
        if spec.peak_flops <= 0 or spec.mem_bandwidth <= 0:
            raise ValueError(f"a GPU spec needs positive figures: {text!r}")
        return spec
    if key in GPUS:
        return GPUS[key]
    for name, spec in GPUS.items():
        if name in key.replace("-", " ").split() or name in key:
            return spec
    raise ValueError(f"unknown GPU {text!r}; known: {', '.join(GPUS)} (or NAME:TFLOPS:TBPS)")

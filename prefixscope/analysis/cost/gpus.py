"""Accelerator specs for the roofline: peak dense bf16 FLOP/s and memory bandwidth.

Figures are the vendors' datasheet numbers for the SXM parts, dense (no 2:4 sparsity): what a
kernel can at best reach, never what it does. Pure Python: the GPU benchmark imports it on a
machine with torch and numpy only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: Bounds of a custom spec (``NAME:TFLOPS:TBPS``), far beyond any part: an H200 does 989
#: TFLOP/s and 4.8 TB/s. Outside them a roofline divides into NaN, overflows or rounds a
#: prefill to 0 s.
MIN_TFLOPS, MAX_TFLOPS = 0.001, 100_000.0
MIN_TBPS, MAX_TBPS = 0.001, 1_000.0
#: A figure as a person types it: a decimal number, ``_`` only between digits (as the
#: command's number flags take them); no nan, inf, hexadecimal or signs.
_FIGURE = re.compile(r"(?:[0-9]+(?:_[0-9]+)*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: A custom spec's name: what a table of results shows.
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


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
    if ":" in key:
        return custom_gpu(text)
    if key in GPUS:
        return GPUS[key]
    for name, spec in GPUS.items():
        if name in key.replace("-", " ").split() or name in key:
            return spec
    raise ValueError(f"unknown GPU {text!r}; known: {', '.join(GPUS)} (or NAME:TFLOPS:TBPS)")


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

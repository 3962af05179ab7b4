"""Timing a GPU or CPU step properly: warm-up, repeats, the median.

On CUDA each repeat is bracketed by CUDA events on the current stream (the host returns before
the device finishes, so wall-clock time would measure the launch); on the CPU by
``time.perf_counter``. The median resists the odd slow repeat a shared machine produces.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from prefixscope.analysis.cost.gpus import GpuSpec, resolve_gpu


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    repeats: int


def measure(
    fn: Callable[[], object], device: torch.device, warmup: int = 1, repeats: int = 5
) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return Timing(statistics.median(times), min(times), repeats)


def measured_peaks(device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """What this device reaches on a large matrix product (FLOP/s) and a large copy (bytes/s):
    the roofline of a device no datasheet entry describes (a CPU)."""
    n = 1024 if device.type == "cpu" else 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    mm = measure(lambda: a @ b, device, warmup=1, repeats=3).min_s
    src = torch.empty(64 * 2**20 // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    cp = measure(lambda: dst.copy_(src), device, warmup=1, repeats=3).min_s
    return 2 * n**3 / mm, 2 * src.numel() * 4 / cp  # a copy reads and writes every byte


def device_spec(device: torch.device, dtype: torch.dtype, gpu: GpuSpec | None) -> GpuSpec:
    """The roofline's spec: as given (resolved where it was named), else the datasheet of the
    CUDA device, else measured."""
    if gpu is not None:
        return gpu
    if device.type == "cuda":
        try:
            return resolve_gpu(torch.cuda.get_device_name(device))
        except ValueError:
            pass
    flops, bandwidth = measured_peaks(device, dtype)
    return GpuSpec("cpu" if device.type == "cpu" else "measured", flops, bandwidth)

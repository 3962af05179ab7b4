"""Where a benchmark's figures come from: the device, its driver and CUDA, torch, the date.

Standard library and torch only (the benchmark's machine may have nothing else); a fact the
machine cannot tell is None, never a guess.
"""

from __future__ import annotations

import datetime
import platform
import shutil
import subprocess

import torch


def driver_version() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it; None without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()
    return first[0].strip() if first else None


def provenance(device: torch.device) -> dict[str, object]:
    facts: dict[str, object] = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device_type": device.type,
        "device_name": "cpu",
        "cuda_runtime": torch.version.cuda,
        "driver": None,
        "compute_capability": None,
        "device_memory_bytes": None,
        "multiprocessors": None,
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(
            device_name=torch.cuda.get_device_name(device),
            driver=driver_version(),
            compute_capability=f"{props.major}.{props.minor}",
            device_memory_bytes=int(props.total_memory),
            multiprocessors=int(props.multi_processor_count),
        )
    return facts

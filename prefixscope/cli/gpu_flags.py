"""GPUs and deployments as flags: each checked where it is parsed, its file read there."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from prefixscope.cli.flags import distinct

if TYPE_CHECKING:
    from prefixscope.analysis.cost.deployment import Deployment
    from prefixscope.analysis.cost.gpus import GpuSpec


def gpu_spec(text: str) -> GpuSpec:
    """A GPU by name, ``NAME:TFLOPS:TBPS`` within the bounds of ``analysis/cost/gpus.py``, or a
    GPU file, resolved here (the file read once): the settings take the spec itself."""
    from prefixscope.analysis.cost.gpus import resolve_gpu

    try:
        return resolve_gpu(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gpu_spec_or_cpu(text: str) -> GpuSpec | str:
    """``gpu_spec``, or ``cpu``: the calibrated cost model of a CPU replay."""
    return "cpu" if text.strip().lower() == "cpu" else gpu_spec(text)


def gpu(text: str) -> str:
    """:func:`gpu_spec`, kept as given: for the flow's parameters, which are text (a schedule
    stores them) and resolve it where they run."""
    gpu_spec(text)
    return text


def gpu_or_cpu(text: str) -> str:
    """``gpu``, or ``cpu``: the calibrated cost model of a CPU replay."""
    return text if text.strip().lower() == "cpu" else gpu(text)


def parsed_deployments(text: str) -> list[Deployment]:
    """``GPU[xTP][,...]`` resolved here, each GPU file read once: the settings of ``fleet``,
    ``plan``, ``roofline`` and ``savings`` take these objects and resolve none of them again."""
    from prefixscope.analysis.cost.deployment import parse_deployment

    out = []
    for item in text.split(","):
        try:
            out.append(parse_deployment(item))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    distinct([d.name for d in out], text)
    return out


def parsed_deployment(text: str) -> Deployment:
    """One ``GPU[xTP]``, resolved here (its GPU file read once)."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"give one deployment, GPU or GPUxTP, got {text!r}")
    return parsed_deployments(text)[0]

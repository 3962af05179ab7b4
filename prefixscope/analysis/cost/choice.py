"""Which cost model prices a model on a replica: the one rule every stage follows.

``--cost-model`` is one of :data:`COST_MODEL_KINDS`:

- ``auto`` (the default): the calibrated model (``costmodel.py``) where the warehouse, or a
  file shipped with prefixscope, holds one for the model and GPU and a replica is one GPU (a
  calibration times one device); else the measured-kernel model (``measured.py``) where its
  tables cover the model, GPU, TP and weights; else the roofline (``roofline.py``), a lower
  bound: what no kernel beats;
- ``calibrated``, ``measured``, ``roofline``: that model alone, refused in one line where it
  cannot price.

:func:`chosen` decides; the fleet builds a step cost from its answer (``fleet/stepcost.py``),
savings a prefill time (``savings.py``). :func:`check_kind` refuses, before the warehouse is
read, what no warehouse could make possible.
"""

from __future__ import annotations

import functools

from prefixscope.analysis.cost import kernels
from prefixscope.analysis.cost.gpus import GPUS, GpuSpec, resolve_gpu
from prefixscope.analysis.cost.measured import MeasuredModel, measured_model
from prefixscope.analysis.cost.models import ModelShape

COST_MODEL_KINDS = ("auto", "calibrated", "measured", "roofline")
#: A calibrated model as ``stages/outcomes.calibrated`` reads it: the run that fitted it (or
#: ``shipped:FILE``), its coefficients and its knees.
Fitted = tuple[str, tuple[float, ...], tuple[float, float]]


def chosen(
    kind: str,
    shape: ModelShape,
    gpu: GpuSpec | None,
    tp: int = 1,
    fitted: Fitted | None = None,
    dtype: str | None = None,
) -> str:
    """``calibrated``, ``measured`` or ``roofline``: what prices ``shape`` on ``tp`` GPUs of
    ``gpu`` (None: the CPU, which only a calibration prices) under ``--cost-model kind``
    (the module docstring's rule), given the calibrated model held (``fitted``) and the
    weights' dtype (None: as published). ValueError in one line where ``kind`` cannot."""
    check_kind(kind, shape, gpu, tp, dtype)
    if kind in ("auto", "calibrated") and fitted is not None and tp == 1:
        return "calibrated"
    if kind == "calibrated":
        name = "the CPU" if gpu is None else gpu.name
        raise ValueError(
            f"no calibrated cost model of {shape.name} on {name} — run replay on that GPU "
            f"(`prefixscope replay --model {shape.name}`), or price with --cost-model auto, "
            "measured or roofline"
        )
    if kind in ("auto", "measured") and measured_refusal(shape, gpu, tp, dtype) is None:
        return "measured"
    if gpu is None:
        raise ValueError("the roofline needs a GPU spec — give --gpu h100, or NAME:TFLOPS:TBPS")
    return "roofline"


def check_kind(
    kind: str, shape: ModelShape, gpu: GpuSpec | None, tp: int = 1, dtype: str | None = None
) -> None:
    """ValueError in one line where ``kind`` cannot price ``shape`` on ``tp`` GPUs of ``gpu``
    whatever the warehouse holds: an unknown kind, a calibration asked of several GPUs, the
    measured model where its tables do not cover."""
    if kind not in COST_MODEL_KINDS:
        raise ValueError(f"unknown cost model {kind!r} — give one of {', '.join(COST_MODEL_KINDS)}")
    where = "the CPU" if gpu is None else f"{gpu.name}x{tp}"
    if kind == "calibrated" and tp > 1:
        raise ValueError(
            f"a calibrated cost model times one GPU, not {where}'s {tp} — price it with "
            "--cost-model auto, measured or roofline, or give a deployment of one GPU"
        )
    if kind == "measured":
        why = measured_refusal(shape, gpu, tp, dtype)
        if why is not None:
            raise ValueError(f"{why} — price with --cost-model roofline or auto")


def device(gpu: str | GpuSpec | None) -> GpuSpec | None:
    """The spec of a GPU as given (``resolve_gpu``), or as resolved already; None for ``cpu``,
    which only a calibration prices."""
    if gpu is None or isinstance(gpu, GpuSpec):
        return gpu
    return None if gpu.lower() == "cpu" else resolve_gpu(gpu)


def wants_calibration(kind: str, tp: int = 1) -> bool:
    """Whether ``kind`` on a replica of ``tp`` GPUs may be priced by a calibrated model, so
    that the warehouse is asked for one."""
    return kind in ("auto", "calibrated") and tp == 1


def measured_refusal(
    shape: ModelShape, gpu: GpuSpec | None, tp: int = 1, dtype: str | None = None
) -> str | None:
    """None where the measured model prices ``shape`` on ``tp`` GPUs of ``gpu``; else why
    not, in one line. The tables are of catalog GPUs: a custom spec, even under a catalog
    name, is not one of them."""
    if gpu is None:
        return f"no measured kernels for the CPU (measured: {', '.join(kernels.gpus())})"
    if GPUS.get(gpu.name) != gpu:
        return (
            f"{gpu.name} is a custom GPU spec: the measured kernels are of catalog GPUs "
            f"({', '.join(kernels.gpus())})"
        )
    found = _measured(shape, gpu.name, tp, dtype)
    return found if isinstance(found, str) else None


def measured_for(
    shape: ModelShape, gpu: GpuSpec | None, tp: int = 1, dtype: str | None = None
) -> MeasuredModel:
    """The measured model of ``shape`` on ``tp`` GPUs of ``gpu``, loaded once per process;
    ValueError where :func:`measured_refusal` says why not."""
    why = measured_refusal(shape, gpu, tp, dtype)
    if why is not None or gpu is None:
        raise ValueError(f"{why} — price with --cost-model roofline or auto")
    found = _measured(shape, gpu.name, tp, dtype)
    assert not isinstance(found, str)
    return found


@functools.lru_cache(maxsize=64)
def _measured(shape: ModelShape, gpu: str, tp: int, dtype: str | None) -> MeasuredModel | str:
    """The model, or why there is none (``measured.covers``): a GPU's tables take a tenth of
    a second to load, and a plan asks once per deployment."""
    try:
        return measured_model(shape, gpu, tp, dtype)
    except ValueError as exc:
        return " ".join(str(exc).split())

"""A cost model measured on some GPU, read from the file the benchmark wrote: what
``prefixscope calibrate`` loads into ``miss_cost_models`` and what a shipped model is.

A file is either one benchmark (``costmodel.BENCH_SCHEMA``: one model, ``gpu_replay/bench.py``)
or a GPU check (``costmodel.CHECK_SCHEMA``: several, ``gpu_replay/check.py``); each model in it
becomes one :class:`Calibration`. Nothing is trusted: the formula must be this version's, every
coefficient finite and non-negative, every knee finite and at least 1, the model one the catalog
knows (its shapes are what the times were measured on), and the GPU a plain name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from prefixscope.analysis.cost import costmodel
from prefixscope.analysis.cost.gpus import GPUS, resolve_gpu
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.roofline import prefill_cost

#: Where a bad file's message sends the user.
_HINT = "give the JSON file of benchmarks/gpu_check.sh or `python -m prefixscope.gpu_replay.bench`"
_GPU_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Calibration:
    """One fitted ``T(new, cached)``, with where and how well it was measured."""

    model: str  # catalog name
    device: str  # as torch named it (``NVIDIA H200``)
    gpu: str  # the key savings, fleet and plan look it up by (``h200``)
    dtype: str
    coefficients: tuple[float, ...]  # one per costmodel.TERMS entry
    knees: tuple[float, float]
    fit_points: int
    holdout_points: int
    holdout_median_pct_err: float | None
    holdout_p90_pct_err: float | None
    roofline_share: float | None
    max_input_tokens: int

    def row(self) -> dict[str, object]:
        """Its ``miss_cost_models`` row, without the run id."""
        values = (
            self.model,
            self.device,
            self.gpu,
            self.dtype,
            costmodel.FORMULA,
            *self.coefficients,
            *self.knees,
            self.fit_points,
            self.holdout_points,
            self.holdout_median_pct_err,
            self.holdout_p90_pct_err,
            self.roofline_share,
            self.max_input_tokens,
        )
        return dict(zip(COST_MODEL_SCHEMA.names, values, strict=True))


COST_MODEL_SCHEMA = pa.schema(
    [
        *((n, pa.string()) for n in ("model", "device", "gpu", "dtype", "formula")),
        *((n, pa.float64()) for n in ("coef_a", "coef_new", "coef_cached", "coef_new_cached")),
        ("coef_new_sq", pa.float64()),
        ("knee_linear_tokens", pa.float64()),
        ("knee_attention_tokens", pa.float64()),
        ("fit_points", pa.int32()),
        ("holdout_points", pa.int32()),
        ("holdout_median_abs_pct_err", pa.float64()),
        ("holdout_p90_abs_pct_err", pa.float64()),
        ("roofline_share", pa.float64()),
        ("max_input_tokens", pa.int64()),
    ]
)


def table(calibrations: Sequence[Calibration]) -> pa.Table:
    return pa.Table.from_pylist([c.row() for c in calibrations], schema=COST_MODEL_SCHEMA)


def read(path: str | Path, gpu: str | None = None) -> list[Calibration]:
    """Every model of the benchmark or GPU-check file at ``path`` (stored under ``gpu`` when
    given, else under the GPU the file names)."""
    p = Path(path)
    if not p.is_file():
        what = "not a regular file" if p.exists() else "no such file"
        raise ValueError(f"{p}: {what} — {_HINT}")
    try:
        data = json.loads(p.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p} is not JSON ({exc}) — {_HINT}") from None
    except RecursionError:
        raise ValueError(f"{p}: JSON nested too deep to be a benchmark's file — {_HINT}") from None
    return parse(data, str(p), gpu)


def parse(data: object, where: str, gpu: str | None = None) -> list[Calibration]:
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == costmodel.BENCH_SCHEMA:
        return [from_bench(data, where, gpu)]  # type: ignore[arg-type]
    if schema == costmodel.CHECK_SCHEMA:
        parts = data.get("parts")  # type: ignore[union-attr]
        if not isinstance(parts, dict):
            raise ValueError(f"{where}: a GPU check without parts — {_HINT}")
        found = [
            from_bench(p["bench"], f"{where}: part {name}", gpu)
            for name, p in parts.items()
            if isinstance(p, dict) and isinstance(p.get("bench"), dict)
            and "cost_model" in p["bench"]
        ]  # fmt: skip
        if not found:
            raise ValueError(f"{where}: no part of this GPU check fitted a cost model — rerun it")
        return found
    raise ValueError(
        f"{where}: schema {schema!r}, expected {costmodel.BENCH_SCHEMA!r} or "
        f"{costmodel.CHECK_SCHEMA!r} — {_HINT}"
    )


def from_bench(part: Mapping[str, object], where: str, gpu: str | None = None) -> Calibration:
    """The calibration of one benchmark's results; a one-line error for anything amiss."""
    try:
        cost = part["cost_model"]
        model = part["model"]["name"]  # type: ignore[index]
        spec_name = part["gpu"]["name"]  # type: ignore[index]
        device, dtype = part["device"], part["dtype"]
        coefficients, knees = cost["coefficients"], cost["knees"]  # type: ignore[index]
        fit_points, holdout_points = cost["fit_samples"], cost["holdout_samples"]  # type: ignore[index]
        max_input = cost["max_input_tokens"]  # type: ignore[index]
    except KeyError as exc:
        raise ValueError(f"{where}: no {exc} in the file — {_HINT}") from None
    except TypeError:
        raise ValueError(f"{where}: not laid out as a benchmark's results — {_HINT}") from None
    if cost.get("formula") != costmodel.FORMULA:  # type: ignore[attr-defined]
        raise ValueError(
            f"{where}: formula {cost.get('formula')!r} is not {costmodel.FORMULA!r} — "  # type: ignore[attr-defined]
            "rerun the benchmark of this version"
        )
    coef = _numbers(coefficients, len(costmodel.TERMS), 0.0, f"{where}: coefficients", 1e3)
    knee = _numbers(knees, 2, 1.0, f"{where}: knees", MAX_TOKENS)
    if not (isinstance(device, str) and device.isprintable() and 0 < len(device) <= 128):
        raise ValueError(
            f"{where}: the device is not a name (1 to 128 printable characters) — {_HINT}"
        )
    key = (gpu or str(spec_name)).strip().lower()
    if not _GPU_NAME.fullmatch(key):
        raise ValueError(f"{where}: GPU name {key!r} — give --gpu NAME (letters, digits, . _ -)")
    found = Calibration(
        model=resolve_model(str(model)).name,
        device=str(device),
        gpu=key,
        dtype=str(dtype),
        coefficients=coef,
        knees=(knee[0], knee[1]),
        fit_points=_count(fit_points, f"{where}: fit_samples", 1),
        holdout_points=_count(holdout_points, f"{where}: holdout_samples", 0),
        holdout_median_pct_err=_optional(cost.get("holdout_median_pct_err"), where),  # type: ignore[attr-defined]
        holdout_p90_pct_err=_optional(cost.get("holdout_p90_pct_err"), where),  # type: ignore[attr-defined]
        roofline_share=_optional(cost.get("roofline_share"), where),  # type: ignore[attr-defined]
        max_input_tokens=_count(max_input, f"{where}: max_input_tokens", 1),
    )
    _above_the_floor(found, where)
    return found


#: How far under the roofline (every FLOP and byte at the datasheet's peak) a measured prefill
#: may price: a little, for an FP8 model against the bf16 peak the roofline prices it at; a
#: fit far below it (zero coefficients, 1e-300) measured nothing.
FLOOR_SHARE = 0.4


def _above_the_floor(c: Calibration, where: str) -> None:
    """A calibration must price the longest prompt it was fitted on at no less than
    :data:`FLOOR_SHARE` of the roofline's time there: on its GPU's datasheet peak, or, for a
    device the catalog does not know (a CPU, a GPU named by the user), on the fastest peak
    FLOP/s and bandwidth of any catalog GPU, which no device of its kind beats."""
    try:
        gpu = resolve_gpu(c.gpu)
    except ValueError:
        fastest = max(GPUS.values(), key=lambda g: g.peak_flops)
        gpu = replace(
            fastest,
            name=f"the fastest catalog GPU ({fastest.name})",
            mem_bandwidth=max(g.mem_bandwidth for g in GPUS.values()),
        )
    new = float(c.max_input_tokens)
    fitted = float(
        costmodel.features(np.array([new]), np.array([0.0]), c.knees)[0] @ c.coefficients
    )
    floor = float(prefill_cost(resolve_model(c.model), gpu, new).seconds)
    if not fitted >= FLOOR_SHARE * floor:
        raise ValueError(
            f"{where}: the fitted model prices a {new:,.0f}-token prefill of {c.model} at "
            f"{fitted:.3g} s, under {FLOOR_SHARE:.0%} of the roofline's {floor:.3g} s at "
            f"{gpu.name}'s datasheet peak, which no device beats — not a measurement; rerun the "
            "benchmark"
        )


#: The most tokens a count or a knee of a benchmark's file may say (a prompt of 2^31 tokens is
#: no prompt), and the largest held-out error in percent it may report.
MAX_TOKENS = 2**31 - 1
MAX_PCT = 1e6


def _numbers(
    values: object, n: int, low: float, what: str, high: float = math.inf
) -> tuple[float, ...]:
    if not isinstance(values, list | tuple) or len(values) != n:
        raise ValueError(f"{what}: expected {n} numbers, got {_shown(values)} — {_HINT}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{what}: {_shown(v)} is not a finite number — {_HINT}")
        if v < low:
            raise ValueError(f"{what}: {v!r} is below {low:g} — the fit is broken; rerun it")
        if v > high:
            raise ValueError(f"{what}: {v:g} is above {high:g} — the fit is broken; rerun it")
        out.append(float(v))
    return tuple(out)


def _shown(value: object) -> str:
    """A value as a message shows it: its repr cut to 40 characters (a huge integer's repr
    is digits without end)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return "an integer of more than 40 digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _count(value: object, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_TOKENS:
        raise ValueError(
            f"{what}: {_shown(value)} is not a whole number from {low} to {MAX_TOKENS:,} — "
            f"{_HINT}"
        )
    return value


def _optional(value: object, where: str) -> float | None:
    if value is None:
        return None
    (v,) = _numbers([value], 1, 0.0, f"{where}: a held-out error or roofline share", MAX_PCT)
    return v

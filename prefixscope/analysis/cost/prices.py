"""What capacity costs: prices per hour, with defaults meant to be overridden from a TOML file.

The defaults are round figures, not quotes: a GPU-hour is each GPU's ``price_hour`` in the
catalog (``cost/gpus.py``: $2.50 for an H100, $3.50 for an H200, …; ``DEFAULT_GPU_HOUR`` for a
GPU outside it), and a ``gpu_hour`` given in the file prices every GPU alike; a GB of server
DRAM costs about half a cent an hour when rented with the host, and a GB of a pooled store (DRAM
or SSD behind the network) less. Give your own:

    # prices.toml
    gpu_hour = 2.50        # $ per GPU-hour, every GPU (default: each GPU's catalog price)
    dram_gb_hour = 0.005   # $ per GB-hour of a replica's DRAM tier
    store_gb_hour = 0.002  # $ per GB-hour of the shared store
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path

from prefixscope.analysis.cost.gpus import GpuSpec, resolve_gpu
from prefixscope.textfile import read_text

#: Each price's bounds, $ per hour: a GPU-hour is never free (every fleet would cost the
#: same) and the largest is far above any rental; a GB-hour of DRAM or of a store may be free.
BOUNDS: dict[str, tuple[float, float, bool]] = {
    # key: (low, high, low allowed)
    "gpu_hour": (0.0, 1_000.0, False),
    "dram_gb_hour": (0.0, 10.0, True),
    "store_gb_hour": (0.0, 10.0, True),
}


#: The unit of every GPU-seconds column this version writes: a replica's busy time times the
#: GPUs it runs on (a prefill at TP 4 busies 4 GPUs), so that dollars are GPU-hours × one GPU's
#: price. Rows written before it counted one tensor-parallel group's time; ``schema.py``
#: converts them on open (× their ``gpus``).
GPU_SECONDS = "gpu-seconds"

#: $ per GPU-hour of a GPU the catalog does not price (a ``NAME:TFLOPS:TBPS`` spec).
DEFAULT_GPU_HOUR = 2.50


@dataclass(frozen=True)
class Prices:
    gpu_hour: float | None = None  # None: each GPU's catalog price_hour
    dram_gb_hour: float = 0.005
    store_gb_hour: float = 0.002

    def gpu_price(self, gpu: str | GpuSpec | None) -> float:
        """$ per hour of one ``gpu`` (its spec, or a name ``resolve_gpu`` reads: the catalog's,
        or a GPU file's path): ``gpu_hour`` when given, else the GPU's own ``price_hour`` (a
        GPU file's included), else ``DEFAULT_GPU_HOUR``."""
        if self.gpu_hour is not None:
            return self.gpu_hour
        spec = gpu if isinstance(gpu, GpuSpec) else _spec(gpu)
        price = spec.price_hour if spec is not None else None
        return DEFAULT_GPU_HOUR if price is None else price

    def check(self, source: object = "price") -> None:
        """Each price a number (int or float; not a boolean, which TOML keeps apart), finite,
        within ``BOUNDS``; ValueError naming ``source`` and the key otherwise."""
        for f in fields(self):
            if f.name == "gpu_hour" and self.gpu_hour is None:
                continue
            problem = price_problem(f.name, getattr(self, f.name))
            if problem is not None:
                raise ValueError(f"{source}: {f.name} {problem} — fix the prices file")

    def per_hour(
        self,
        replicas: int,
        dram_gb: float,
        store_gb: float,
        gpus: int = 1,
        gpu: str | GpuSpec | None = None,
    ) -> float:
        """$ per hour of a fleet: its GPUs (``gpus`` per replica, of kind ``gpu``; HBM comes
        with them), each replica's DRAM tier and the shared store."""
        return (
            replicas * gpus * self.gpu_price(gpu)
            + replicas * dram_gb * self.dram_gb_hour
            + store_gb * self.store_gb_hour
        )


def price_problem(key: str, value: object) -> str | None:
    """Why ``value`` cannot be the price ``key``, in a few words; None when it can."""
    low, high, low_ok = BOUNDS[key]
    bound = f"{'from' if low_ok else 'above'} {low:g} and at most {high:,g} $ per hour"
    if isinstance(value, bool):  # TOML's true is not $1.00
        return f"must be a number {bound}, got a boolean ({str(value).lower()})"
    if not isinstance(value, (int, float)):
        return f"must be a number {bound}, got a {type(value).__name__} {str(value)[:40]!r}"
    if not (math.isfinite(value) and (low <= value if low_ok else low < value) and value <= high):
        return f"must be a finite number {bound}, got {value!r}"
    return None


#: The largest prices file read: one is a few lines.
MAX_BYTES = 64 * 2**10


def load_prices(path: str | Path | None) -> Prices:
    """The defaults, overridden by the keys of ``path`` (a TOML file); an unknown key is an
    error, so a typo does not silently keep a default."""
    if path is None:
        return Prices()
    text = read_text(path, MAX_BYTES, "a prices file", "give a TOML file of prices")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not TOML: {exc} — fix the prices file") from None
    known = {f.name for f in fields(Prices)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"{path}: unknown price {unknown[0][:40]!r}; known: {', '.join(sorted(known))} "
            "— fix the prices file"
        )
    for key, value in data.items():
        problem = price_problem(key, value)
        if problem is not None:
            raise ValueError(f"{path}: {key} {problem} — fix the prices file")
    return replace(Prices(), **{k: float(v) for k, v in data.items()})


def _spec(gpu: str | None) -> GpuSpec | None:
    """The spec ``gpu`` names, None when it names none (a custom GPU known by its name alone)."""
    if not gpu:
        return None
    try:
        return resolve_gpu(gpu)
    except ValueError:
        return None

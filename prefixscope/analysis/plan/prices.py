"""What capacity costs: prices per hour, with defaults meant to be overridden from a TOML file.

The defaults are round figures, not quotes: a GPU-hour of an H100-class part at on-demand cloud
rates is a few dollars, a GB of server DRAM costs about half a cent an hour when rented with the
host, and a GB of a pooled store (DRAM or SSD behind the network) less. Give your own:

    # prices.toml
    gpu_hour = 2.50        # $ per GPU-hour: one replica is one GPU
    dram_gb_hour = 0.005   # $ per GB-hour of a replica's DRAM tier
    store_gb_hour = 0.002  # $ per GB-hour of the shared store
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path


@dataclass(frozen=True)
class Prices:
    gpu_hour: float = 2.50
    dram_gb_hour: float = 0.005
    store_gb_hour: float = 0.002

    def check(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and value >= 0 and value < float("inf")):
                raise ValueError(f"price {f.name} must be a finite number >= 0, got {value!r}")

    def per_hour(self, replicas: int, dram_gb: float, store_gb: float) -> float:
        """$ per hour of a fleet: its GPUs (HBM comes with them), each replica's DRAM tier and
        the shared store."""
        return (
            replicas * self.gpu_hour
            + replicas * dram_gb * self.dram_gb_hour
            + store_gb * self.store_gb_hour
        )


def load_prices(path: str | Path | None) -> Prices:
    """The defaults, overridden by the keys of ``path`` (a TOML file); an unknown key is an
    error, so a typo does not silently keep a default."""
    if path is None:
        return Prices()
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not TOML: {exc}") from None
    known = {f.name for f in fields(Prices)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown price {unknown[0]!r}; known: {', '.join(sorted(known))}")
    prices = replace(Prices(), **data)
    prices.check()
    return prices

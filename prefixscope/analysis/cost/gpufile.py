"""A custom GPU from a TOML file: what ``--gpu my-gpu.toml`` reads.

    # my-gpu.toml
    name = "h20"
    tflops = 148          # peak dense bf16, TFLOP/s (required)
    tbps = 4.0            # HBM bandwidth, TB/s (required)
    hbm_gib = 96          # HBM per GPU (needed to size a deployment)
    host_dram_gib = 256   # host DRAM per GPU
    host_link_gbps = 63   # GPU <-> host, GB/s one way
    nvlink_gbps = 450     # GPU <-> GPU, GB/s one way (0: none)
    price_hour = 1.80     # $ per GPU-hour

Every key is checked where it is read, so a wrong file stops the command with one line that
names the file and the key: a number (TOML keeps booleans apart, and ``true`` is not 1), finite,
within ``BOUNDS``; an unknown key is refused, so a typo does not leave a figure unset. Pure
Python (``tomllib``), like ``gpus.py``, which builds the spec from what this returns (and
takes its bounds of a custom spec's figures from here: one set of bounds for both forms).
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

from prefixscope.textfile import read_text

#: Bounds of a custom spec's figures, far beyond any part: an H200 does 989 TFLOP/s and
#: 4.8 TB/s. Outside them a roofline divides into NaN, overflows or rounds a prefill to 0 s.
MIN_TFLOPS, MAX_TFLOPS = 0.001, 100_000.0
MIN_TBPS, MAX_TBPS = 0.001, 1_000.0
#: A custom spec's name: what a table of results shows.
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

#: The largest file read: a spec is a few hundred bytes.
MAX_BYTES = 64 * 2**10
#: key: (lowest, highest, lowest allowed). The ranges hold every part there is with room to
#: spare (the largest HBM sold is 288 GB per GPU, the fastest NVLink 900 GB/s one way) and
#: stop what would divide by zero or overflow: a GPU with no HBM, a free GPU-hour.
BOUNDS: dict[str, tuple[float, float, bool]] = {
    "tflops": (MIN_TFLOPS, MAX_TFLOPS, True),
    "tbps": (MIN_TBPS, MAX_TBPS, True),
    "hbm_gib": (0.0, 1_048_576.0, False),
    "host_dram_gib": (0.0, 1_048_576.0, True),
    "host_link_gbps": (0.0, 10_000.0, False),
    "nvlink_gbps": (0.0, 100_000.0, True),
    "price_hour": (0.0, 1_000.0, False),
}
REQUIRED = ("name", "tflops", "tbps")
FIX = "fix the GPU file"


def read_gpu_file(path: str | Path) -> dict[str, str | float]:
    """The keys of ``path``, each checked: ``name`` (lower-cased) and the figures it gives, as
    floats; ValueError (one line: the file, the key, what to do) for anything else."""
    table = _read(path)
    unknown = sorted(set(table) - set(BOUNDS) - {"name"})
    if unknown:
        raise ValueError(
            f"{path}: unknown key {unknown[0][:40]!r}; known: name, {', '.join(BOUNDS)} — {FIX}"
        )
    missing = [k for k in REQUIRED if k not in table]
    if missing:
        raise ValueError(
            f"{path}: no {missing[0]!r} key (name, tflops and tbps are required) — {FIX}"
        )
    name = table["name"]
    if not (isinstance(name, str) and NAME.fullmatch(name.lower())):
        raise ValueError(
            f"{path}: key 'name' must be a string of 1 to 64 letters, digits, '.', '_' or '-' "
            f"— {FIX}"
        )
    values: dict[str, str | float] = {"name": name.lower()}
    values.update({key: _number(path, key, table[key]) for key in BOUNDS if key in table})
    return values


def _read(path: str | Path) -> dict[str, object]:
    text = read_text(path, MAX_BYTES, "a GPU spec", FIX)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not TOML: {' '.join(str(exc).split())} — {FIX}") from None


def _number(path: str | Path, key: str, value: object) -> float:
    low, high, low_ok = BOUNDS[key]
    bound = f"{'from' if low_ok else 'above'} {low:g} and at most {high:,g}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = "a boolean" if isinstance(value, bool) else type(value).__name__
        raise ValueError(f"{path}: key {key!r} must be a number {bound}, got {shown} — {FIX}")
    number = float(value)
    too_low = number < low if low_ok else number <= low
    if not math.isfinite(number) or too_low or number > high:
        raise ValueError(f"{path}: key {key!r} must be a number {bound}, got {value!r} — {FIX}")
    return number

"""Measured kernel times of vLLM on a GPU, and their interpolation between measured points.

The tables are aiconfigurator's (``data/kernels/PROVENANCE.json``: repository, commit, the
files, vLLM's version; Apache-2.0), reduced by ``benchmarks/kernels/reduce.py`` to regular grids
in milliseconds. Every lookup interpolates linearly in log time over log size (a kernel's time
is a power law between neighbouring points: flat while launch- or weight-bound, linear in the
work once compute-bound), and beyond the last measured size scales by the work: linearly in
tokens, keys or bytes, quadratically in a prefill's length. Points a table lacks inside its grid
(the largest batches of long sequences, not measured for lack of memory) are filled the same
way from their nearest measured neighbour along that axis.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

import numpy as np

FOLDER = "kernels"
MOE_DTYPES = ("bf16", "fp8", "fp8_block", "int4", "mxfp4")


def _log(x: np.ndarray | float) -> np.ndarray:
    return np.log(np.maximum(np.asarray(x, np.float64), 1e-12))


def fill(cube: np.ndarray, axis: int, xs: np.ndarray, power: float) -> np.ndarray:
    """``cube`` with each NaN along ``axis`` set from the nearest measured point on that axis,
    scaled by ``(x / x₀)^power``; a line with no measured point stays NaN."""
    out = np.moveaxis(np.array(cube, np.float64), axis, -1)
    flat = out.reshape(-1, out.shape[-1])
    for row in flat:
        ok = np.isfinite(row)
        if ok.all() or not ok.any():
            continue
        known = np.flatnonzero(ok)
        for i in np.flatnonzero(~ok):
            j = known[np.argmin(np.abs(_log(xs[known]) - _log(xs[i])))]
            row[i] = row[j] * (xs[i] / xs[j]) ** power
    return np.moveaxis(flat.reshape(out.shape), -1, axis)


def interp(x: np.ndarray | float, xs: np.ndarray, ys: np.ndarray, power: float) -> np.ndarray:
    """``ys`` (ms, over sizes ``xs``) at ``x``: log-log between points, the first point's time
    below the grid (launch-bound) and ``(x / x_max)^power`` times the last above it."""
    x = np.asarray(x, np.float64)
    inside = np.exp(np.interp(_log(np.clip(x, xs[0], xs[-1])), _log(xs), _log(ys)))
    return np.where(x > xs[-1], ys[-1] * (x / xs[-1]) ** power, inside)


def _bracket(xs: np.ndarray, x: float) -> tuple[int, int, float]:
    """Neighbours of ``x`` in ``xs`` and the weight of the upper one, in log space, clamped."""
    x = float(np.clip(x, xs[0], xs[-1]))
    hi = int(np.clip(np.searchsorted(xs, x), 1, len(xs) - 1))
    lo = hi - 1
    w = (np.log(x) - np.log(xs[lo])) / (np.log(xs[hi]) - np.log(xs[lo]))
    return lo, hi, float(w)


def grid2(bs: np.ndarray, ss: np.ndarray, cube: np.ndarray, b, s, power_s: float) -> np.ndarray:
    """``cube`` (ms over batches ``bs`` × sizes ``ss``) at batch ``b`` and size ``s``
    (broadcast): log-log in ``s`` along every measured batch, then between the two batches
    around ``b`` (scaled by ``b / b_max`` past the last)."""
    b, s = np.broadcast_arrays(np.asarray(b, np.float64), np.asarray(s, np.float64))
    flat_s = s.ravel()
    along = np.stack([_log(interp(flat_s, ss, cube[i], power_s)) for i in range(len(bs))])
    clipped = np.clip(b.ravel(), bs[0], bs[-1])
    hi = np.clip(np.searchsorted(bs, clipped), 1, len(bs) - 1)
    lo = hi - 1
    w = (np.log(clipped) - np.log(bs[lo])) / (np.log(bs[hi]) - np.log(bs[lo]))
    cols = np.arange(flat_s.size)
    out = np.exp((1 - w) * along[lo, cols] + w * along[hi, cols])
    out = (out * np.maximum(b.ravel() / bs[-1], 1.0)).reshape(b.shape)
    return out if out.shape else out[()]


@dataclass(frozen=True)
class Kernels:
    """One GPU's measured tables (``reduce.py`` writes them; NaNs filled on load)."""

    gpu: str
    vllm: str
    arrays: dict

    def has(self, name: str) -> bool:
        return name in self.arrays

    # -- linear layers -------------------------------------------------------------------
    def gemm_dtypes(self) -> tuple[str, ...]:
        return tuple(k[5:-3] for k in self.arrays if k.startswith("gemm_") and k.endswith("_ms"))

    def gemm(self, m: np.ndarray | float, n: float, k: float, dtype: str) -> np.ndarray:
        """ms of ``(m × k) @ (k × n)`` with weights in ``dtype``: log-log in ``m``, then
        bilinear in log ``n`` and log ``k`` (scaled by ``n / n_max`` and ``k / k_max`` past the
        grid's edge)."""
        a = self.arrays
        ms, ns, ks = a[f"gemm_{dtype}_m"], a[f"gemm_{dtype}_n"], a[f"gemm_{dtype}_k"]
        cube = a[f"gemm_{dtype}_ms"]
        n0, n1, wn = _bracket(ns, n)
        k0, k1, wk = _bracket(ks, k)
        out = 0.0
        for i, win in ((n0, 1 - wn), (n1, wn)):
            for j, wkk in ((k0, 1 - wk), (k1, wk)):
                if win * wkk:
                    out = out + win * wkk * _log(interp(m, ms, cube[:, i, j], 1.0))
        scale = max(n / ns[-1], 1.0) * max(k / ks[-1], 1.0)
        return np.exp(out) * scale

    # -- attention -----------------------------------------------------------------------
    def _heads(self, prefix: str, heads: int, kv_heads: int, head_dim: int) -> tuple[int, float]:
        """The measured (heads, KV heads, head dim) nearest this one, and the factor its time
        is scaled by: the heads' ratio (the work is linear in heads at one KV-head ratio)."""
        table = self.arrays[f"{prefix}_heads"]
        same_dim = np.flatnonzero(table[:, 2] == head_dim)
        if not len(same_dim):
            raise KeyError(f"no {prefix} attention measured at head dim {head_dim}")
        exact = same_dim[(table[same_dim, 0] == heads) & (table[same_dim, 1] == kv_heads)]
        if len(exact):
            return int(exact[0]), 1.0
        group = heads / kv_heads
        score = np.abs(np.log(table[same_dim, 0] / table[same_dim, 1] / group)) * 4 + np.abs(
            np.log(table[same_dim, 0] / heads)
        )
        best = int(same_dim[np.argmin(score)])
        return best, heads / float(table[best, 0])

    def _grid2(self, prefix: str, row: int, b, s) -> np.ndarray:
        a = self.arrays
        power_s = 2.0 if prefix.endswith("ctx") else 1.0
        return grid2(a[f"{prefix}_b"], a[f"{prefix}_s"], a[f"{prefix}_ms"][row], b, s, power_s)

    def context(self, heads: int, kv_heads: int, head_dim: int, batch, tokens) -> np.ndarray:
        """ms of causal attention over ``batch`` prefills of ``tokens`` each (no prefix)."""
        row, scale = self._heads("ctx", heads, kv_heads, head_dim)
        return self._grid2("ctx", row, batch, tokens) * scale

    def generation(self, heads: int, kv_heads: int, head_dim: int, batch, keys) -> np.ndarray:
        """ms of ``batch`` decode tokens, each attending to ``keys`` cached ones."""
        row, scale = self._heads("gen", heads, kv_heads, head_dim)
        return self._grid2("gen", row, batch, keys) * scale

    def mla(self, kind: str, heads: int, batch, tokens) -> np.ndarray:
        """ms of DeepSeek-V3's attention module (``kind`` ``ctx`` or ``gen``) with ``heads``
        heads on the GPU, over the tables' heads (log-log between measured head counts)."""
        a = self.arrays
        hs = a[f"mla_{kind}_h"]
        h0, h1, wh = _bracket(hs, heads)
        power = 2.0 if kind == "ctx" else 1.0
        bs, ss, cube = a[f"mla_{kind}_b"], a[f"mla_{kind}_s"], a[f"mla_{kind}_ms"]
        lo = _log(grid2(bs, ss, cube[h0], batch, tokens, power))
        hi = _log(grid2(bs, ss, cube[h1], batch, tokens, power))
        return np.exp((1 - wh) * lo + wh * hi) * max(heads / hs[-1], 1.0)

    # -- mixture of experts and all-reduce -----------------------------------------------
    def moe(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int, dtype: str):
        """ms of one fused MoE layer over ``tokens`` tokens, or None where not measured."""
        keys = self.arrays.get("moe_keys")
        if keys is None or dtype not in MOE_DTYPES:
            return None
        want = np.array([MOE_DTYPES.index(dtype), hidden, inter, topk, experts, tp])
        rows = np.flatnonzero((keys == want).all(axis=1))
        if not len(rows):
            return None
        curve = self.arrays["moe_ms"][rows[0]]
        return interp(tokens, self.arrays["moe_tokens"], curve, 1.0)

    def allreduce(self, elements, gpus: int) -> np.ndarray:
        """ms of vLLM's custom all-reduce of ``elements`` bf16 values over ``gpus`` GPUs (CUDA
        graph; the table's ``message_size`` counts elements); the nearest measured group size
        above when ``gpus`` is not one."""
        a = self.arrays
        row = int(min(np.searchsorted(a["ar_gpus"], gpus), len(a["ar_gpus"]) - 1))
        return interp(elements, a["ar_elements"], a["ar_ms"][row], 1.0)


def _prepare(raw: dict) -> dict:
    out = dict(raw)
    for key in list(out):
        if not key.endswith("_ms"):
            continue
        stem = key[:-3]
        cube = np.asarray(out[key], np.float64)
        if key.startswith("gemm_"):
            cube = fill(cube, 0, out[f"{stem}_m"], 1.0)
            cube = fill(cube, 1, out[f"{stem}_n"], 1.0)  # an (n, k) never measured at all
            cube = fill(cube, 2, out[f"{stem}_k"], 1.0)
        elif stem in ("ctx", "gen"):
            cube = fill(cube, 1, out[f"{stem}_b"], 1.0)
            cube = fill(cube, 2, out[f"{stem}_s"], 2.0 if stem == "ctx" else 1.0)
        elif stem.startswith("mla_"):
            cube = fill(cube, 1, out[f"{stem}_b"], 1.0)
            cube = fill(cube, 2, out[f"{stem}_s"], 2.0 if stem == "mla_ctx" else 1.0)
        elif stem == "moe":
            cube = fill(cube, 1, out["moe_tokens"], 1.0)
        elif stem == "ar":
            cube = fill(cube, 1, out["ar_elements"], 1.0)
        out[key] = cube
    return out


@functools.cache
def provenance() -> dict:
    return json.loads(
        (resources.files("prefixscope") / "data" / FOLDER / "PROVENANCE.json").read_text()
    )


def gpus() -> tuple[str, ...]:
    """The catalog GPUs measured tables exist for."""
    return tuple(provenance()["gpus"])


@functools.cache
def load(gpu: str) -> Kernels | None:
    """The measured tables of a catalog GPU (``gpus.py`` name), or None."""
    info = provenance()["gpus"].get(gpu)
    if info is None:
        return None
    with (resources.files("prefixscope") / "data" / FOLDER / f"{gpu}.npz").open("rb") as f:
        raw = dict(np.load(f))
    return Kernels(gpu, info["vllm"], _prepare(raw))

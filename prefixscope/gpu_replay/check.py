"""The GPU check's one results file: every part's benchmark file, with its exit status and wall
time, and per model the figures that matter (``benchmarks/gpu_check.sh`` runs the parts).

    python3 -m prefixscope.gpu_replay.check --out check.json --status status.tsv

``status.tsv`` holds one line per part, ``NAME<TAB>EXIT<TAB>SECONDS<TAB>FILE``. A part cut from
outside (its time guard) leaves the shapes it finished in its file, without a fit: they are
fitted here, and the model says so. numpy and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from prefixscope.analysis.cost import costmodel
from prefixscope.gpu_replay import summary
from prefixscope.gpu_replay.runner import ShapeResult


def read_json(path: Path) -> dict | None:
    """A part's file as written, or None where it is missing or not a JSON object."""
    try:
        part = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return part if isinstance(part, dict) else None


def read_part(path: Path) -> dict | None:
    return bench_of(read_json(path))


def bench_of(part: dict | None) -> dict | None:
    """A miss-versus-hit benchmark's file (``bench.py``), fitted if it was cut; None else."""
    if part is None or not isinstance(part.get("results"), list):
        return None
    results = [ShapeResult(**r) for r in part["results"]]
    if "cost_model" not in part and len(results) >= 2:  # cut before its own fit
        part.update(cost_model=summary.fitted(results), summary=summary.figures(results))
        part["fitted_after_cut"] = True
    return part


def measured_figures(part: dict) -> dict[str, object] | None:
    """The measured-kernel model (``cost/measured.py``: vLLM's kernels as measured elsewhere)
    against this GPU's timings: its prediction over the time measured here, median and range,
    for misses and for hits, over the shapes of 1,024 new tokens or more (shorter ones run
    eagerly here, at a launch floor vLLM does not pay); None where the tables do not cover the
    GPU or model."""
    from dataclasses import fields

    import numpy as np

    from prefixscope.analysis.cost.measured import covers, measured_model
    from prefixscope.analysis.cost.models import ModelShape

    known = {f.name for f in fields(ModelShape)}
    shape = ModelShape(**{k: v for k, v in part["model"].items() if k in known})
    gpu, dtype = part["gpu"]["name"], part.get("dtype") or "bf16"
    if covers(shape, gpu, 1, dtype) is not None:
        return None
    model = measured_model(shape, gpu, 1, dtype)
    out: dict[str, object] = {"shapes": 0}
    for kind in ("miss", "hit"):
        ratios = []
        for r in part["results"]:
            if r["new_tokens"] < 1024 or (kind == "hit" and not r["cached_tokens"]):
                continue
            new, cached = (r["input_tokens"], 0) if kind == "miss" else (
                r["new_tokens"], r["cached_tokens"])  # fmt: skip
            ratios.append(float(model.prefill_seconds(new, cached)) / r[f"{kind}_s"])
        if ratios:
            out[f"{kind}_ratio_median"] = float(np.median(ratios))
            out[f"{kind}_ratio_min"] = float(np.min(ratios))
            out[f"{kind}_ratio_max"] = float(np.max(ratios))
            out["shapes"] = max(int(out["shapes"]), len(ratios))  # type: ignore[call-overload]
    return out


def model_figures(name: str, part: dict) -> dict[str, object]:
    cost = part.get("cost_model") or {}
    return {
        "part": name,
        "model": part["model"]["name"],
        "gpu": part["gpu"]["name"],
        "dtype": part["dtype"],
        "measured_layers": part.get("measured_layers"),
        "scaling": part.get("scaling"),
        "shapes_fitted": [
            {"cached": r["cached_tokens"], "new": r["new_tokens"]} for r in part["results"]
        ],
        "shapes_skipped": part.get("skipped", []),
        "complete": part.get("complete", False),
        "holdout_median_pct_err": cost.get("holdout_median_pct_err"),
        "holdout_p90_pct_err": cost.get("holdout_p90_pct_err"),
        "knees": cost.get("knees"),
        "coefficients": cost.get("coefficients"),
        **(part.get("summary") or {}),
        "measured_model": measured_figures(part),
    }


def merge(status_lines: Sequence[str]) -> dict[str, object]:
    parts: dict[str, dict] = {}
    tables = None
    for line in status_lines:
        if not line.strip():
            continue
        name, rc, wall, file = line.rstrip("\n").split("\t")
        raw = read_json(Path(file))
        bench = bench_of(raw)
        if bench is None and raw is not None and isinstance(raw.get("points"), list):
            bench = tables = raw  # the tables part (``tables.py``)
        parts[name] = {"exit": int(rc), "wall_s": float(wall), "bench": bench}
    benches = [p["bench"] for p in parts.values() if p["bench"] and "results" in p["bench"]]
    return {
        "schema": costmodel.CHECK_SCHEMA,
        "provenance": benches[0]["provenance"] if benches else None,
        "seconds": sum(p["wall_s"] for p in parts.values()),
        "models": [
            model_figures(n, p["bench"])
            for n, p in parts.items()
            if p["bench"] and p["bench"].get("results")
        ],
        # the measured model's tables / this GPU, per kernel kind (``tables.py``)
        "tables": None
        if tables is None
        else {
            "gpu": tables["tables"]["gpu"],
            "skipped": tables.get("skipped", []),
            "summary": tables.get("summary", {}),
        },  # fmt: skip
        "parts": parts,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m prefixscope.gpu_replay.check")
    p.add_argument("--status", required=True, help="NAME, EXIT, SECONDS, FILE per line (tabs)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    merged = merge(Path(args.status).read_text().splitlines())
    Path(args.out).write_text(json.dumps(merged, indent=2))
    for m in merged["models"]:  # type: ignore[attr-defined]
        errors = (m["holdout_median_pct_err"], m["holdout_p90_pct_err"])
        held = "nothing held out" if None in errors else "held-out median {:.1f}%, p90 {:.1f}%"
        print(
            f"{m['model']} ({m['part']}): {len(m['shapes_fitted'])} shapes, "
            f"{len(m['shapes_skipped'])} skipped; {held.format(*errors)}"
        )
        vllm = m.get("measured_model")
        if vllm and "miss_ratio_median" in vllm:
            hit = vllm.get("hit_ratio_median", float("nan"))
            print(
                f"  measured vLLM kernels / this GPU's timings, median: miss "
                f"{vllm['miss_ratio_median']:.2f}, hit {hit:.2f}"
            )
    for kind, t in ((merged.get("tables") or {}).get("summary") or {}).items():  # type: ignore[union-attr]
        what = "the chunk rule / measured" if kind == "chunk" else "table / this GPU"
        print(f"  {kind}: {what}, median {t['ratio_median']:.2f} over {t['points']} points")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
